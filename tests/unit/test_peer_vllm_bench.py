"""vLLM ``bench serve`` result files (a hand-made fixture in the layout vLLM 0.34 writes: vLLM
cannot run on this machine), read by ``compare``: what the file records of its run (the label,
no version), its closed loop, its lengths, its appended load points, and the note on input
tokens, true for each version of vLLM (it changed in 0.20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loadgen
from loadgen.analysis.peer_results import load_peer_result
from loadgen.errors import ResultError
from loadgen.metric_defs import lookup

VLLM = Path(__file__).parents[1] / "fixtures" / "peer_results" / "vllm"
FILE = VLLM / "openai-chat-infqps-concurrency8-tiny-llama-20260112-141503.json"


def raw() -> dict:
    return json.loads(FILE.read_text())


def write(tmp_path: Path, *lines: dict) -> Path:
    path = tmp_path / "result.json"
    path.write_text("\n".join(json.dumps(d) for d in lines))
    return path


class TestWhatTheFileRecords:
    def test_no_version_and_the_file_names_the_run(self):
        """vLLM writes no version of itself: "not recorded"; without --label the run is the
        file's name, which vLLM builds from the backend, rate, concurrency and model."""
        r = load_peer_result(FILE)
        assert (r.version, r.summary["run_id"], r.name) == (None, "not recorded", FILE.stem)
        assert r.source == "vllm bench serve, version not recorded (results file)"
        out = loadgen.compare([Path(__file__).parents[1] / "fixtures" / "runs" / "base-a", FILE]).to_dict()
        assert out["peer_results"][FILE.stem]["version"] == "not recorded"

    def test_its_label_names_the_run(self, tmp_path):
        assert load_peer_result(write(tmp_path, raw() | {"label": "h100-tp1"})).name == "h100-tp1"

    def test_lengths_are_the_totals_over_completed_requests(self):
        realised = load_peer_result(FILE).summary["conditions"]["lengths"]["realised"]
        assert realised == {
            "server_prompt_tokens": {"count": 198, "mean": 50688 / 198},
            "server_output_tokens": {"count": 198, "mean": 25344 / 198},
        }

    @pytest.mark.parametrize(
        ("fields", "load"),
        [
            ({"request_rate": "inf", "max_concurrency": 8}, {"concurrency": 8, "arrival": "closed loop"}),
            ({"request_rate": "inf", "max_concurrency": None}, {"arrival": "all at once"}),
            (
                {"request_rate": 4.0, "max_concurrency": None, "burstiness": 1.0},
                {"rate": 4.0, "arrival": "poisson"},
            ),
            (
                {"request_rate": 4.0, "max_concurrency": 16, "burstiness": 0.5},
                {"rate": 4.0, "arrival": "gamma", "burstiness": 0.5, "max_concurrency": 16},
            ),
        ],
    )
    def test_the_load_as_it_ran(self, tmp_path, fields, load):
        assert load_peer_result(write(tmp_path, raw() | fields)).summary["conditions"]["load"] == load


class TestAppendedLines:
    def test_the_pooled_row_has_exact_means_and_rates(self, tmp_path):
        """Two --append-result lines: TTFT and E2E means pooled by completed requests, rates over
        the summed durations, percentiles per stage."""
        a = raw() | {"request_rate": 2.0, "mean_ttft_ms": 100.0, "completed": 100, "duration": 50.0}
        b = raw() | {"request_rate": 4.0, "mean_ttft_ms": 200.0, "completed": 300, "duration": 75.0}
        a |= {"request_throughput": 2.0, "failed": 0}
        b |= {"request_throughput": 4.0, "failed": 0}
        s = load_peer_result(write(tmp_path, a, b)).summary
        assert [st["name"] for st in s["stages"]] == ["rate=2", "rate=4"]
        assert lookup(s, "ttft_ms", "mean") == (100 * 100.0 + 300 * 200.0) / 400
        assert lookup(s, "request_throughput_rps") == (2.0 * 50 + 4.0 * 75) / 125
        assert lookup(s, "ttft_ms", "p99") is None and lookup(s, "tpot_ms", "mean") is None
        assert (s["counts"]["ok"], s["window"]["seconds"]) == (400, 125.0)

    def test_a_bad_field_on_a_line_is_named_with_its_line(self, tmp_path):
        path = write(tmp_path, raw(), raw() | {"duration": "long"})
        with pytest.raises(ResultError, match=r"field line 2: duration is not a number \(got 'long'\)"):
            load_peer_result(path)


class TestInputTokensNote:
    def test_the_note_says_which_versions_count_what(self):
        """From vLLM 0.20 (vllm/benchmarks/lib/endpoint_request_func.py) both the openai and the
        openai-chat backends set each request's prompt length from the server's
        usage.prompt_tokens, and serve.py sums those; 0.19.1 and before summed the dataset's
        targets. The note says so, and that the file does not say which vLLM wrote it."""
        note = next(d for d in load_peer_result(FILE).definitions if "Input tokens" in d)
        assert "since vLLM 0.20 the server's `usage.prompt_tokens`" in note
        assert "openai and openai-chat backends alike" in note
        assert "before 0.20 always the dataset's target lengths" in note
        assert "does not record which vLLM wrote it" in note
