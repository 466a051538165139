"""Arrival traces: Mooncake, Azure and native layouts, their errors, window, time_scale, prefix reuse."""

import filecmp
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.errors import LoadgenError
from loadgen.workload.traces import TraceError, load_trace, prefix_reuse

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = ROOT / "traces" / "mooncake_sample.jsonl"
AZURE = ROOT / "traces" / "azure_sample.csv"
NATIVE = ROOT / "traces" / "native_sample.jsonl"
S = 1_000_000_000  # ns per second


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def mooncake_row(ms: float, length: int, ids: list[int], out: int = 10) -> dict:
    return {"timestamp": ms, "input_length": length, "output_length": out, "hash_ids": ids}


def error(path: Path, **kw) -> str:
    with pytest.raises(TraceError) as e:
        load_trace(path, **kw)
    return str(e.value)


class TestMooncake:
    def test_sample_parses(self):
        """The shipped sample: 300 requests over 59.777 s, hash_ids per request, 512-token blocks."""
        tr = load_trace(MOONCAKE)
        assert (tr.fmt, tr.rows, len(tr), tr.span_s, tr.block_tokens) == ("mooncake", 300, 300, 59.777, 512)
        assert tr.offsets_ns[:3].tolist() == [0, 111_000_000, 167_000_000]
        assert tr.offsets_ns[-1] == 59_777_000_000
        assert (tr.input_tokens[0], tr.input_tokens[-1], int(tr.input_tokens.sum())) == (1546, 1562, 898_120)
        assert (tr.output_tokens[0], tr.output_tokens[-1]) == (104, 173)
        assert tr.hash_ids is not None
        assert (tr.hash_ids[0], tr.hash_ids[-1]) == ((0, 1, 2, 3), (915, 916, 917, 918))

    def test_timestamps_are_re_origined_at_the_first_row(self, tmp_path):
        """Public traces may start late (ms since the collection started): offsets start at 0."""
        path = jsonl(
            tmp_path / "t.jsonl", [mooncake_row(1178625, 600, [0, 1]), mooncake_row(1181678.5, 10, [2])]
        )
        assert load_trace(path).offsets_ns.tolist() == [0, 3_053_500_000]

    def test_hash_ids_must_cover_the_prompt(self, tmp_path):
        """One id per 512-token block, the last one partial: 700 tokens need 2, not 3."""
        path = jsonl(tmp_path / "t.jsonl", [mooncake_row(0, 512, [0]), mooncake_row(5, 700, [0, 1, 2])])
        assert error(path) == (
            f"{path} line 2: hash_ids has 3 ids, expected ceil(input_length / 512) = 2 for input_length 700 "
            "(one id per 512-token block, the last one partial)"
        )

    @pytest.mark.parametrize(
        ("row", "message"),
        [
            (mooncake_row(0, 10, [0], out=-5), "output_length is -5, expected a whole number of tokens >= 0"),
            (
                {"timestamp": 0, "output_length": 1, "hash_ids": []},
                "input_length is missing, expected a whole ",
            ),
            (
                mooncake_row("soon", 10, [0]),
                "timestamp is 'soon', expected milliseconds >= 0 from trace start",
            ),
            (mooncake_row(0, 10, ["a"]), "hash_ids is ['a'], expected a list of integers"),
            (mooncake_row(0, 10, [0]) | {"hash_ids": 5}, "hash_ids is 5, expected a list of integers"),
        ],
    )
    def test_bad_value_names_file_line_field_and_fix(self, tmp_path, row, message):
        """The third line is bad: the message gives the file, the line, the field and what is wanted."""
        good = mooncake_row(0, 10, [0])
        path = jsonl(tmp_path / "t.jsonl", [good, good, row])
        assert error(path, fmt="mooncake").startswith(f"{path} line 3: {message}")

    def test_out_of_order_rows_are_an_error(self, tmp_path):
        """A row earlier than the one before it is a broken export, not something to sort silently."""
        path = jsonl(
            tmp_path / "t.jsonl",
            [mooncake_row(0, 10, [0]), mooncake_row(900, 10, [1]), mooncake_row(800, 10, [2])],
        )
        assert error(path) == (
            f"{path} line 3: timestamp goes back in time (earlier than line 2); "
            "a trace must be in time order: sort it by time first"
        )

    def test_equal_timestamps_are_fine(self, tmp_path):
        """Public traces log many requests in the same millisecond."""
        path = jsonl(tmp_path / "t.jsonl", [mooncake_row(0, 10, [0]), mooncake_row(0, 10, [1])])
        assert load_trace(path).offsets_ns.tolist() == [0, 0]

    def test_hash_ids_on_every_line_or_none(self, tmp_path):
        """Mixing rows with and without hash_ids is an error naming the first line."""
        rows = [mooncake_row(0, 10, [0]), {"timestamp": 1, "input_length": 10, "output_length": 1}]
        path = jsonl(tmp_path / "t.jsonl", rows)
        assert error(path) == (
            f"{path} line 2: hash_ids is missing, but line 1 has them; give hash_ids on every line or on none"
        )

    def test_invalid_json(self, tmp_path):
        """A line that is not JSON is named."""
        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps(mooncake_row(0, 10, [0])) + "\n{oops\n")
        assert error(path).startswith(f"{path} line 2: not valid JSON (")


class TestAzure:
    def test_sample_parses(self):
        """The shipped sample: 300 requests over 59.9 s, no hash_ids."""
        tr = load_trace(AZURE)
        assert (tr.fmt, tr.rows, len(tr), tr.span_s, tr.hash_ids) == ("azure", 300, 300, 59.9, None)
        assert tr.offsets_ns[:3].tolist() == [0, 27_921_400, 34_995_200]
        assert tr.offsets_ns[-1] == 59_900_000_000
        assert (tr.input_tokens[0], tr.input_tokens[-1], int(tr.input_tokens.sum())) == (2739, 946, 327_693)
        assert (tr.output_tokens[0], tr.output_tokens[-1]) == (175, 91)

    def test_timestamps_to_the_nanosecond(self, tmp_path):
        """7-digit (2023) and 6-digit +00:00 (2024) stamps, across midnight and time zones, exactly."""
        path = tmp_path / "a.csv"
        path.write_text(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 23:59:58.6805900,374,44\n"
            "2023-11-17 00:00:03,396,109\n"
            "2023-11-17 00:00:03.000001+00:00,2,7\n"
            "2023-11-17 02:00:04.5+02:00,91,16\n"
        )
        tr = load_trace(path)
        assert tr.offsets_ns.tolist() == [0, 4_319_410_000, 4_319_411_000, 5_819_410_000]
        assert tr.input_tokens.tolist() == [374, 396, 2, 91]
        assert tr.output_tokens.tolist() == [44, 109, 7, 16]

    @pytest.mark.parametrize(
        ("row", "message"),
        [
            (
                "2023-13-01 00:00:00,5,5",
                "TIMESTAMP is '2023-13-01 00:00:00', "
                "expected a date and time like 2023-11-16 18:15:46.6805900",
            ),
            ("2023-11-16 18:15:49.1,-4,5", "ContextTokens is '-4', expected a whole number of tokens >= 0"),
            (
                "2023-11-16 18:15:49.1,4,many",
                "GeneratedTokens is 'many', expected a whole number of tokens >= 0",
            ),
            (
                "2023-11-16 18:15:49.1,4",
                "the row has 2 fields, expected 3 (TIMESTAMP,ContextTokens,GeneratedTokens)",
            ),
        ],
    )
    def test_bad_row_names_file_line_field_and_fix(self, tmp_path, row, message):
        """The third line is bad: the message gives the file, the line, the column and what is wanted."""
        path = tmp_path / "a.csv"
        path.write_text(
            f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n{row}\n"
        )
        assert error(path) == f"{path} line 3: {message}"

    def test_bad_header(self, tmp_path):
        """The header must be the Azure trace's own."""
        path = tmp_path / "a.csv"
        path.write_text("time,in,out\n2023-11-16 18:15:46,1,1\n")
        assert error(path) == (
            f"{path} line 1: header is 'time,in,out', expected TIMESTAMP,ContextTokens,GeneratedTokens "
            "(the Azure LLM inference trace layout)"
        )


class TestNative:
    def test_sample_parses(self):
        """The shipped sample: 200 requests over 49.14117 s, millisecond stamps with microseconds."""
        tr = load_trace(NATIVE)
        assert (tr.fmt, tr.rows, len(tr), tr.span_s, tr.hash_ids) == ("native", 200, 200, 49.14117, None)
        assert tr.offsets_ns[:3].tolist() == [0, 195_183_000, 225_888_000]
        assert tr.offsets_ns[-1] == 49_141_170_000
        assert (tr.input_tokens[0], tr.input_tokens[-1], int(tr.input_tokens.sum())) == (457, 136, 180_495)
        assert (tr.output_tokens[0], tr.output_tokens[-1]) == (53, 466)

    def test_hash_ids_are_optional(self, tmp_path):
        """Native rows may carry Mooncake-style hash_ids, checked the same way."""
        rows = [
            {"timestamp_ms": 0, "input_tokens": 513, "output_tokens": 5, "hash_ids": [7, 8]},
            {"timestamp_ms": 2.5, "input_tokens": 100, "output_tokens": 5, "hash_ids": [7]},
        ]
        tr = load_trace(jsonl(tmp_path / "n.jsonl", rows))
        assert (tr.fmt, tr.hash_ids, tr.offsets_ns.tolist()) == ("native", ((7, 8), (7,)), [0, 2_500_000])

    def test_layout_is_told_by_the_time_field(self, tmp_path):
        """timestamp_ms is native, timestamp is Mooncake; anything else names the line."""
        path = jsonl(tmp_path / "n.jsonl", [{"time": 0, "input_tokens": 1, "output_tokens": 1}])
        assert error(path) == (
            f"{path} line 1: cannot tell the layout; expected a Mooncake object with timestamp, a native "
            "object with timestamp_ms, or the Azure CSV header TIMESTAMP,ContextTokens,GeneratedTokens"
        )


def tiny(tmp_path: Path) -> Path:
    """Five requests at 0, 1, 2.5, 4 and 7 s of trace time, with input lengths 1..5."""
    times = [0, 1000, 2500, 4000, 7000]
    rows = [
        {"timestamp_ms": t, "input_tokens": i + 1, "output_tokens": 10 * (i + 1)} for i, t in enumerate(times)
    ]
    return jsonl(tmp_path / "tiny.jsonl", rows)


class TestWindowAndScale:
    def test_whole_trace(self, tmp_path):
        """No window: every row, offsets as recorded."""
        tr = load_trace(tiny(tmp_path))
        assert tr.offsets_ns.tolist() == [0, 1 * S, 2_500_000_000, 4 * S, 7 * S]
        assert (tr.rows, tr.span_s) == (5, 7.0)

    def test_time_scale_stretches_and_compresses(self, tmp_path):
        """2 replays the trace over twice the time (half the rate); 0.5 twice as fast."""
        assert load_trace(tiny(tmp_path), time_scale=2).offsets_ns.tolist() == [
            0,
            2 * S,
            5 * S,
            8 * S,
            14 * S,
        ]
        half = load_trace(tiny(tmp_path), time_scale=0.5)
        assert half.offsets_ns.tolist() == [0, 500_000_000, 1_250_000_000, 2 * S, 3_500_000_000]
        assert half.span_s == 7.0  # the span is trace time, before scaling

    def test_window_selects_then_re_origins(self, tmp_path):
        """[1 s, 4 s) keeps the rows at 1 and 2.5 s (not 4 s), the first of them at offset 0."""
        tr = load_trace(tiny(tmp_path), start_s=1, window_s=3)
        assert tr.offsets_ns.tolist() == [0, 1_500_000_000]
        assert tr.input_tokens.tolist() == [2, 3]
        assert tr.output_tokens.tolist() == [20, 30]
        assert (tr.rows, tr.span_s) == (5, 1.5)

    def test_window_is_cut_in_trace_time_before_scaling(self, tmp_path):
        """The window selects the same rows whatever the scale; only their spacing changes."""
        tr = load_trace(tiny(tmp_path), start_s=1, window_s=3, time_scale=2)
        assert tr.offsets_ns.tolist() == [0, 3 * S]

    def test_window_to_the_end(self, tmp_path):
        """start_s alone keeps everything from there on."""
        assert load_trace(tiny(tmp_path), start_s=2.5).input_tokens.tolist() == [3, 4, 5]

    def test_empty_window_names_the_span(self, tmp_path):
        """A window past the last row says what the trace covers."""
        path = tiny(tmp_path)
        assert error(path, start_s=7.5) == (
            f"{path}: no requests from 7.5 s to the end; the trace spans 0 to 7.000 s (5 rows): "
            "move start_s or widen window_s"
        )
        assert error(path, start_s=4.5, window_s=2).startswith(f"{path}: no requests from 4.5 s to 6.5 s;")

    @pytest.mark.parametrize(
        ("kw", "message"),
        [
            ({"time_scale": 0}, "time_scale is 0, expected a number > 0 (2 = twice as slow)"),
            ({"start_s": -1}, "start_s is -1, expected seconds >= 0 from the trace's first row"),
            ({"window_s": 0}, "window_s is 0, expected seconds > 0 (or none for the whole trace)"),
        ],
    )
    def test_bad_settings(self, tmp_path, kw, message):
        """Replay settings are checked before the file is read."""
        assert error(tiny(tmp_path), **kw) == message


class TestFiles:
    def test_missing_file(self, tmp_path):
        """A missing trace is a one-line user error."""
        path = tmp_path / "nope.jsonl"
        with pytest.raises(LoadgenError) as e:
            load_trace(path)
        assert (
            str(e.value)
            == f"{path}: no such file (give a local Mooncake .jsonl, Azure .csv or native .jsonl)"
        )

    def test_empty_file(self, tmp_path):
        """An empty trace says so."""
        path = tmp_path / "t.jsonl"
        path.write_text("\n")
        assert error(path) == f"{path}: the file is empty (expected one request a line)"


def reuse_trace(tmp_path: Path) -> Path:
    return jsonl(
        tmp_path / "reuse.jsonl",
        [
            mooncake_row(0, 1024, [1, 2]),
            mooncake_row(1000, 1300, [1, 2, 3]),
            mooncake_row(2000, 600, [9, 2]),
            mooncake_row(3000, 1300, [1, 2, 3]),
            mooncake_row(4000, 1536, [1, 4, 5]),
        ],
    )


class TestPrefixReuse:
    def test_counts_leading_runs_only(self, tmp_path):
        """Hits per request, in 512-token blocks:
        [1, 2]     1024 tokens: nothing seen yet                              ->    0
        [1, 2, 3]  1300: [1, 2] led request 1                                 -> 1024
        [9, 2]      600: 2 was seen, but not after 9 at the start             ->    0
        [1, 2, 3]  1300: the whole of request 2, its partial last block too   -> 1300
        [1, 4, 5]  1536: only [1] leads an earlier request                    ->  512
        (0 + 1024 + 0 + 1300 + 512) / (1024 + 1300 + 600 + 1300 + 1536) = 2836 / 5760."""
        assert prefix_reuse(load_trace(reuse_trace(tmp_path))) == 2836 / 5760

    def test_only_the_window_counts(self, tmp_path):
        """From 1 s on, request 1 is not in the replay, so request 2 starts cold:
        0 + 0 + 1300 + 512 over 1300 + 600 + 1300 + 1536 = 1812 / 4736."""
        assert prefix_reuse(load_trace(reuse_trace(tmp_path), start_s=1)) == 1812 / 4736

    def test_sample_designed_reuse(self):
        """The Mooncake sample's designed reuse: 945 full blocks of 898,120 input tokens hit."""
        assert prefix_reuse(load_trace(MOONCAKE)) == 945 * 512 / 898_120

    def test_needs_hash_ids(self):
        """An Azure trace has no block ids to measure reuse with."""
        with pytest.raises(TraceError) as e:
            prefix_reuse(load_trace(AZURE))
        assert str(e.value) == "prefix_reuse needs hash_ids, and this azure trace has none"


def test_no_heavy_imports():
    """Loading every sample leaves pandas, pyarrow and matplotlib unimported (a fresh interpreter)."""
    code = (
        "import sys\n"
        "from loadgen.workload.datasets import load_dataset, select\n"
        "from loadgen.workload.traces import load_trace, prefix_reuse\n"
        f"select(load_dataset({str(ROOT / 'data' / 'sharegpt_sample.json')!r}), seed=0)\n"
        f"load_dataset({str(ROOT / 'data' / 'prompts_sample.jsonl')!r})\n"
        f"prefix_reuse(load_trace({str(MOONCAKE)!r}))\n"
        f"load_trace({str(AZURE)!r}); load_trace({str(NATIVE)!r})\n"
        "print(sorted(m for m in ('pandas', 'pyarrow', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_samples_are_what_the_script_writes(tmp_path):
    """scripts/make_samples.py is deterministic and the shipped files are its output, unedited
    (if numpy ever changes its random streams, rerun the script and update the literals here)."""
    spec = importlib.util.spec_from_file_location(
        "loadgen_make_samples", ROOT / "scripts" / "make_samples.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    written = script.write(tmp_path)
    for path in written.values():
        shipped = ROOT / path.relative_to(tmp_path)
        assert filecmp.cmp(path, shipped, shallow=False), f"{shipped} differs from the script's output"
