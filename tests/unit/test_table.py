"""RecordTable: a run's records as columns (loadgen/analysis/table.py), the analysis on it, and
its memory: the summary and report of a long run must not grow with its records as objects."""

from __future__ import annotations

import tracemalloc
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from loadgen.analysis import bootstrap as bs
from loadgen.analysis import curve, metrics
from loadgen.analysis.chunks import is_ones
from loadgen.analysis.gaps import SMALL, GapSamples, order_statistics, stream_stats
from loadgen.analysis.table import RecordTable, as_table
from loadgen.errors import ResultError
from loadgen.metric_defs import PERCENTILES
from loadgen.records import ReadReport, RequestRecord, read_records, write_records
from loadgen.report.timeseries import per_second
from loadgen.result import RunResult, SkippedLinesWarning, load_records, load_run, load_table
from loadgen.server import metrics as server_metrics

MS = 1_000_000
BASE = 10**13  # a perf_counter_ns-sized clock


def mixed_records(n: int, seed: int = 7) -> list[RequestRecord]:
    """ok, failed (streamed a while or not), cancelled and warm-up requests; one- and
    multi-token chunks, reasoning, a mismatched token list, missing timestamps, Retry-After."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        send = BASE + i * 7 * MS
        k = int(rng.integers(0, 40))
        times = (send + int(rng.integers(20, 400)) * MS + np.cumsum(rng.integers(0, 30 * MS, k))).tolist()
        tokens = rng.integers(1, 4, k).tolist() if i % 3 == 0 else [1] * k
        roll = rng.random()
        ok = roll > 0.15
        error = (
            None if ok else ("cancelled" if roll < 0.03 else str(rng.choice(["http_500", "read", "timeout"])))
        )
        reasoning = times[: k // 3] if i % 5 == 0 else []
        out.append(
            RequestRecord(
                id=i,
                warmup=i < 6,
                t_sched_ns=send - int(rng.integers(0, 40 * MS)),
                t_send_ns=send,
                requested_output_tokens=40,
                requested_prompt_tokens=100,
                ok=ok,
                error_class=error,
                error_message=None if ok else f"failure {i}",
                http_status=200 if ok else (None if error == "read" else 500),
                retry_after_s=float(rng.integers(1, 9)) if error == "http_500" and i % 2 else None,
                response_id=f"cmpl-{i}" if ok else None,
                t_first_byte_ns=times[0] - MS if times else None,
                t_first_token_ns=times[0] if times else None,
                t_first_content_ns=times[len(reasoning)] if len(reasoning) < k else None,
                t_end_ns=(times[-1] if times else send) + 2 * MS if i % 17 else None,
                chunk_times_ns=times,
                chunk_tokens=tokens[:-1] if i % 23 == 5 and k else tokens,  # i % 23 == 5: mismatched
                reasoning_times_ns=reasoning,
                reasoning_tokens=[1] * len(reasoning),
                prompt_tokens=100 if ok else None,
                output_tokens=sum(tokens) if ok else None,
                token_source=str(rng.choice(["usage", "chunks"])),
                prompt_tokens_source="usage" if ok else "target",
                worker=i % 3,
                stage=i * 3 // n,
            )
        )
    return out


def as_stored(r: RequestRecord) -> RequestRecord:
    """A record as a table gives it back: a token list that does not match the chunks is one
    token per chunk (the analysis's rule), a negative token count is 0."""
    tokens = r.chunk_tokens if len(r.chunk_tokens) == len(r.chunk_times_ns) else [1] * len(r.chunk_times_ns)
    return replace(r, chunk_tokens=[max(t, 0) for t in tokens])


def odd_records() -> list[RequestRecord]:
    """None everywhere it may be, no chunks, a gap over 2^31 ns, a chunk of 300 tokens."""
    return [
        RequestRecord(0, True, BASE, BASE, 5, 10),
        RequestRecord(
            1,
            False,
            BASE,
            BASE + MS,
            5,
            10,
            ok=True,
            retry_after_s=2.5,
            t_first_token_ns=BASE + 9 * MS,
            t_end_ns=BASE + 9 * 10**9,
            chunk_times_ns=[BASE + 9 * MS, BASE + 9 * MS + 3 * 10**9, BASE + 9 * MS + 3 * 10**9 + 1],
            chunk_tokens=[1, 300, 0],
            reasoning_times_ns=[BASE + 9 * MS],
            reasoning_tokens=[2],
            output_tokens=301,
            token_source="usage",
            worker=3,
            stage=2,
        ),
        # chunks without a t_first_token_ns: its first delta is from t_send
        RequestRecord(2, False, BASE, BASE, 5, 10, chunk_times_ns=[BASE + 5, BASE + 9], chunk_tokens=[2, 1]),
    ]


class TestRoundTrip:
    def test_records_come_back_exactly(self):
        records = odd_records() + mixed_records(200)
        table = RecordTable.from_records(records)
        assert len(table) == len(records)
        assert table.to_records() == [as_stored(r) for r in records]

    def test_dtypes_are_the_smallest_that_hold_the_values(self):
        odd = RecordTable.from_records(odd_records())
        assert odd.chunks.deltas.dtype == np.int64  # a 3 s gap
        assert odd.chunks.tokens.dtype == np.uint16  # a chunk of 300 tokens
        plain = RecordTable.from_records(mixed_records(60))
        assert plain.chunks.deltas.dtype == np.int32 and plain.chunks.tokens.dtype == np.uint8
        ones = RecordTable.from_records(
            [replace(r, chunk_tokens=[1] * len(r.chunk_times_ns)) for r in mixed_records(60)]
        )
        assert is_ones(ones.chunks.tokens) and ones.nbytes < plain.nbytes
        assert ones.column("t_end_ns").dtype == np.int64 and ones.present("t_end_ns").dtype == bool

    def test_derived_columns(self):
        records = mixed_records(100)
        table = as_table(records)
        last, has_last = table.ints("t_last_chunk_ns")
        first_r, has_r = table.ints("t_first_reasoning_ns")
        for i, r in enumerate(records):
            assert table.column("n_chunks")[i] == len(r.chunk_times_ns)
            assert table.column("n_reasoning")[i] == len(r.reasoning_times_ns)
            assert (last[i] if has_last[i] else None) == (r.chunk_times_ns[-1] if r.chunk_times_ns else None)
            assert (first_r[i] if has_r[i] else None) == (r.reasoning_times_ns or [None])[0]

    def test_select_concat_and_chunk_blocks(self):
        records = odd_records() + mixed_records(150)
        table = as_table(records)
        mask = table.column("ok")
        ok, rest = table.select(mask), table.select(~mask)
        joined = RecordTable.concat([rest, ok])
        assert joined.chunks.deltas.dtype == np.int64  # int32 blocks and the int64 one, widened
        expected = [r for r in records if not r.ok] + [r for r in records if r.ok]
        assert joined.to_records() == [as_stored(r) for r in expected]
        assert table.select([5, 0, 5]).to_records() == [as_stored(records[i]) for i in (5, 0, 5)]
        assert len(RecordTable.concat([])) == 0 and RecordTable.from_records([]).to_records() == []
        # chunk_blocks: absolute times of the selected rows, a few rows at a time
        seen: dict[int, list[int]] = {}
        for block in table.chunk_blocks(mask, max_chunks=64):
            times, bounds = block.times.tolist(), np.r_[0, np.cumsum(block.counts)].tolist()
            for row, a, b in zip(block.rows.tolist(), bounds, bounds[1:]):
                seen[row] = times[a:b]
        assert seen == {i: r.chunk_times_ns for i, r in enumerate(records) if r.ok}
        assert as_table(table) is table


class TestFromFile:
    def write(self, path: Path, records: list[RequestRecord], extra: bytes = b"") -> list[int]:
        """requests.jsonl with ``extra`` appended; the byte offset of each record's line."""
        lines = [r.to_json() + b"\n" for r in records]
        path.write_bytes(b"".join(lines) + extra)
        return np.r_[0, np.cumsum([len(x) for x in lines])].tolist()

    def test_whole_file_and_a_byte_range(self, tmp_path):
        records = mixed_records(40)
        offsets = self.write(tmp_path / "requests.jsonl", records)
        path = tmp_path / "requests.jsonl"
        assert RecordTable.from_file(path).to_records() == [as_stored(r) for r in records]
        middle = RecordTable.from_file(path, start=offsets[10], end=offsets[25])
        assert middle.to_records() == [as_stored(r) for r in records[10:25]]
        assert len(RecordTable.from_file(path, start=offsets[40])) == 0

    def test_lines_that_are_not_records_are_counted_as_read_records_counts_them(self, tmp_path):
        records = mixed_records(12)
        bad = b'\n[1, 2]\n{"id": 3}\nnot json\n\n' + records[0].to_json() + b'\n{"id": 99, "warmup": fal'
        self.write(tmp_path / "requests.jsonl", records, bad)
        path = tmp_path / "requests.jsonl"
        want, got = ReadReport(), ReadReport()
        expected = list(read_records(path, want))
        table = RecordTable.from_file(path, got)
        assert (got.skipped_lines, got.first_skipped) == (want.skipped_lines, want.first_skipped) == (4, 14)
        assert table.to_records() == [as_stored(r) for r in expected]

    def test_a_value_of_the_wrong_type_skips_its_line(self, tmp_path):
        """read_records passes such a line on (to fail later, in an analysis); the table skips
        and counts it, and keeps the other lines of its block."""
        records = mixed_records(5)
        line = orjson.loads(records[1].to_json())
        line["t_send_ns"] = "soon"
        path = tmp_path / "requests.jsonl"
        path.write_bytes(
            records[0].to_json() + b"\n" + orjson.dumps(line) + b"\n" + records[2].to_json() + b"\n"
        )
        report = ReadReport()
        assert RecordTable.from_file(path, report).to_records() == [
            as_stored(records[0]),
            as_stored(records[2]),
        ]
        assert (report.skipped_lines, report.first_skipped) == (1, 2)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[list[RequestRecord], RecordTable]:
    """A realistic mixed run, as records and as the table read back from its requests.jsonl."""
    records = mixed_records(400)
    run_dir = tmp_path_factory.mktemp("run")
    write_records(run_dir / "requests.jsonl", records)
    return records, load_table(run_dir)


class TestAnalysisOnTheTable:
    def test_summary_is_the_records_summary(self, run):
        records, table = run
        assert metrics.summarize(table) == metrics.summarize(records)
        assert metrics.summarize(table)["metrics"]["reasoning"]["requests"] > 0

    def test_every_analysis_agrees(self, run):
        records, table = run
        pd.testing.assert_frame_equal(metrics.request_frame(table), metrics.request_frame(records))
        for a, b in zip(metrics.itl_values(table), metrics.itl_values(records)):
            assert np.array_equal(a, b)
        limits = metrics.client_limits(table, lag_threshold_ms=1)
        assert limits is not None and limits == metrics.client_limits(records, lag_threshold_ms=1)
        assert curve.steady_state(table) == curve.steady_state(records)
        assert server_metrics.client_means(table) == server_metrics.client_means(records)
        pd.testing.assert_frame_equal(per_second(table), per_second(records))
        a, b = bs.RunSamples.from_run(table, {}), bs.RunSamples.from_run(records, {})
        assert a.n == b.n and all(np.array_equal(a.values[k], b.values[k]) for k in a.values)
        assert all(np.array_equal(a.owners[k], b.owners[k]) for k in a.owners)

    def test_itl_is_the_gaps_of_each_request(self, run):
        """The definition, from the records one by one: every gap of ok measured requests,
        and each gap divided among the later chunk's tokens (one per chunk if mismatched)."""
        records, table = run
        itl, per_token = [], []
        for r in records:
            if r.ok and not r.warmup and len(r.chunk_times_ns) >= 2:
                gaps = np.diff(r.chunk_times_ns) / 1e6
                same = len(r.chunk_tokens) == len(r.chunk_times_ns)
                n = np.maximum(r.chunk_tokens[1:], 1) if same else np.ones(len(gaps), int)
                itl.append(gaps)
                per_token.append(np.repeat(gaps / n, n))
        got = metrics.itl_values(table)
        assert np.array_equal(got[0], np.concatenate(itl)) and np.array_equal(
            got[1], np.concatenate(per_token)
        )

    def test_reasoning_only_as_far_as_the_first_token(self, run):
        records, table = run
        block = metrics.summarize(table)["metrics"]["reasoning"]
        ttfr = [
            (r.reasoning_times_ns[0] - r.t_send_ns) / 1e6
            for r in records
            if r.reasoning_times_ns and r.ok and not r.warmup
        ]
        assert block["ttfr_ms"] == metrics.distribution(ttfr)


class TestStreamedStatistics:
    """Past gaps.SMALL samples the ITL is summarized in passes over blocks, never materialised."""

    def table(self, k: int, tokens_high: int, spread: int, seed: int = 3) -> RecordTable:
        rng = np.random.default_rng(seed)
        rows = []
        for i in range(k):
            gaps = rng.integers(-spread // 50, spread, 300)  # a few negative: a clock is a clock
            times = (BASE + i * MS + np.cumsum(gaps)).tolist()
            tokens = rng.integers(0, tokens_high + 1, 300).tolist()
            rows.append(
                RequestRecord(
                    i, False, BASE, BASE, 1, 1, ok=i % 9 > 0, chunk_times_ns=times, chunk_tokens=tokens
                )
            )
        return RecordTable.from_records(rows)

    @pytest.mark.parametrize(
        ("tokens_high", "spread"), [(1, 40 * MS), (3, 40 * MS), (1, 7), (300, 5 * 10**9)]
    )
    def test_same_numbers_as_numpy_on_the_materialised_samples(self, tokens_high, spread):
        table = self.table(300, tokens_high, spread)
        for per_token in (False, True):
            samples = GapSamples(table, table.column("ok"), per_token=per_token)
            values = samples.to_ms()
            assert samples.size == values.size > SMALL
            got = metrics.distribution(samples)
            want = metrics.distribution(values)  # numpy on the array
            assert [got[k] for k in PERCENTILES] == [want[k] for k in PERCENTILES]
            assert (got["count"], got["min"], got["max"]) == (want["count"], want["min"], want["max"])
            assert got["mean"] == pytest.approx(want["mean"], rel=1e-12, abs=1e-12)
            assert got["std"] == pytest.approx(want["std"], rel=1e-12)
            assert (
                stream_stats(samples, list(PERCENTILES.values()))
                is samples.stats[tuple(PERCENTILES.values())]
            )

    def test_order_statistics_over_any_int64_range(self):
        rng = np.random.default_rng(0)
        values = np.concatenate(
            [rng.integers(-(2**62), 2**62, 5000), [-(2**63), 2**63 - 1], np.zeros(300, int)]
        )
        weights = rng.integers(1, 4, len(values))
        order = np.sort(np.repeat(values, weights))
        ranks = {0, 1, 17, 2500, len(order) // 2, len(order) - 1}

        def blocks():
            for i in range(0, len(values), 999):
                yield values[i : i + 999], weights[i : i + 999]

        found = order_statistics(blocks, ranks, int(values.min()), int(values.max()))
        assert found == {k: int(order[k]) for k in ranks}


class TestResultFiles:
    def test_load_table_warns_about_skipped_lines_like_load_records(self, tmp_path):
        write_records(tmp_path / "requests.jsonl", mixed_records(5))
        with open(tmp_path / "requests.jsonl", "ab") as fh:
            fh.write(b'{"id": 5, "warm')
        with pytest.warns(SkippedLinesWarning) as table_warning:
            table = load_table(tmp_path)
        with pytest.warns(SkippedLinesWarning) as records_warning:
            records = load_records(tmp_path)
        assert str(table_warning[0].message) == str(records_warning[0].message)
        assert "1 line(s) do not parse" in str(table_warning[0].message)
        assert table.to_records() == [as_stored(r) for r in records]
        with warnings.catch_warnings(record=True):
            assert load_run(tmp_path).attrs["skipped_lines"] == 1

    def test_missing_files(self, tmp_path):
        with pytest.raises(ResultError, match="not a loadgen run directory"):
            load_table(tmp_path)
        (tmp_path / "summary.json").write_text("{}")
        with pytest.raises(ResultError, match=r"requests\.jsonl is missing"):
            load_table(tmp_path)

    def test_run_result_reads_its_records_when_asked(self, tmp_path):
        records = mixed_records(30)
        write_records(tmp_path / "requests.jsonl", records)
        res = RunResult(tmp_path, {"run_id": "r"})  # type: ignore[typeddict-item]
        assert res.run_id == "r" and len(res.table) == 30 and res.table is res.table
        assert res.records == [as_stored(r) for r in records] and res.records is res.records
        pd.testing.assert_frame_equal(res.frame(), metrics.request_frame(records))


def synthetic_run(run_dir: Path, requests: int, chunks: int = 64) -> None:
    """requests.jsonl of a closed loop of one-token chunks, 5-30 ms apart."""
    rng = np.random.default_rng(requests)
    run_dir.mkdir()
    with open(run_dir / "requests.jsonl", "wb") as fh:
        for i in range(requests):
            send = BASE + (i // 32) * 400 * MS
            times = (send + 50 * MS + np.cumsum(rng.integers(5 * MS, 30 * MS, chunks))).tolist()
            rec = RequestRecord(
                i,
                i < 10,
                send,
                send,
                chunks,
                100,
                ok=i % 50 > 0,
                response_id=f"r{i}",
                t_first_token_ns=times[0],
                t_end_ns=times[-1] + MS,
                chunk_times_ns=times,
                chunk_tokens=[1] * chunks,
                prompt_tokens=100,
                output_tokens=chunks,
                token_source="usage",
            )
            fh.write(rec.to_json() + b"\n")


def traced_peak(run_dir: Path) -> int:
    """Peak bytes traced while the summary and the per-second bins are computed from the file."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        table = load_table(run_dir)
        metrics.summarize(table)
        per_second(table)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


# Bytes per stored chunk value, transient peaks included: the table keeps about 4 (the time
# delta; one-token chunks store no token array) plus the request's scalars; the analysis
# passes add a bounded block. Records as Python objects took over 80 before any analysis. The
# HTTP phases' seven nullable stamps are 63 bytes a request, about 1 a chunk at 64 a request
# (peak and growth alike).
PEAK_PER_CHUNK = 25
GROWTH_PER_CHUNK = 17


def test_memory_is_a_small_constant_per_chunk(tmp_path):
    synthetic_run(tmp_path / "warm", 50)
    traced_peak(tmp_path / "warm")  # first calls import and cache what they need: not measured
    n = 1500
    synthetic_run(tmp_path / "small", n)
    synthetic_run(tmp_path / "large", 4 * n)
    small, large = traced_peak(tmp_path / "small"), traced_peak(tmp_path / "large")
    chunks = 64 * n
    assert large / (4 * chunks) < PEAK_PER_CHUNK, f"{large / (4 * chunks):.1f} bytes per chunk"
    assert (large - small) / (3 * chunks) < GROWTH_PER_CHUNK, f"{(large - small) / (3 * chunks):.1f}"
