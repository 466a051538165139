"""Result files of other tools (tests/fixtures/peer_results, each in its tool's published
layout) read into loadgen's summary layout with the file's own numbers, and into ``compare``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import loadgen
from loadgen.analysis.compare_peers import NOT_RECORDED
from loadgen.analysis.peer_results import detect, load_peer_result
from loadgen.errors import ResultError
from loadgen.metric_defs import lookup
from loadgen.report import compare as compare_report

PEERS = Path(__file__).parents[1] / "fixtures" / "peer_results"
RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
VLLM = PEERS / "vllm" / "openai-chat-infqps-concurrency8-tiny-llama-20260112-141503.json"
GUIDELLM = PEERS / "guidellm" / "benchmarks.json"
AIPERF = PEERS / "aiperf" / "profile_export_aiperf.json"
INFERENCE_PERF = PEERS / "inference_perf" / "summary_lifecycle_metrics.json"


def raw(path: Path) -> dict:
    return json.loads(path.read_text())


class TestDetect:
    @pytest.mark.parametrize(
        ("path", "tool"),
        [
            (VLLM, "vllm bench serve"),
            (GUIDELLM, "GuideLLM"),
            (GUIDELLM.parent, "GuideLLM"),
            (AIPERF, "AIPerf"),
            (AIPERF.parent, "AIPerf"),
            (INFERENCE_PERF, "inference-perf"),
            (INFERENCE_PERF.parent / "stage_1_lifecycle_metrics.json", "inference-perf"),
            (INFERENCE_PERF.parent, "inference-perf"),
        ],
    )
    def test_each_tools_file_and_folder(self, path, tool):
        assert detect(path) == tool

    def test_a_loadgen_run_is_none(self):
        """A loadgen run, its folder or its summary.json, is not a peer result."""
        assert detect(RUNS / "base-a") is None
        assert detect(RUNS / "base-a" / "summary.json") is None

    def test_an_unknown_json_file_is_none(self, tmp_path):
        (tmp_path / "x.json").write_text('{"hello": 1}')
        assert detect(tmp_path / "x.json") is None


class TestVllm:
    def test_the_files_numbers(self):
        """Each figure of the table is the file's: p99 TTFT, rates, counts, duration."""
        r = load_peer_result(VLLM)
        s, f = r.summary, raw(VLLM)
        assert (r.tool, r.name) == ("vllm bench serve", VLLM.stem)
        assert lookup(s, "ttft_ms", "p99") == 318.5129 == f["p99_ttft_ms"]
        assert lookup(s, "ttft_ms", "p50") == 171.9032  # median_ttft_ms
        assert lookup(s, "itl_ms", "p99") == 24.9980
        assert lookup(s, "tpot_ms", "mean") == 11.0217
        assert lookup(s, "e2e_ms", "p90") == 1731.0470
        assert lookup(s, "ttft_ms", "p95") is None  # not asked of vLLM: not invented
        assert lookup(s, "output_tokens_per_s") == f["output_throughput"]
        assert lookup(s, "request_throughput_rps") == f["request_throughput"]
        assert lookup(s, "input_tokens_per_s") == 50688 / 41.23771
        assert lookup(s, "goodput_rps") is None  # "request_goodput": null
        c = s["counts"]
        assert (c["sent"], c["ok"], c["failed"], c["error_rate"]) == (200, 198, 2, 0.01)
        assert s["window"]["seconds"] == 41.23771
        assert s["conditions"]["target"] == {"endpoint": "chat", "model": "tiny-llama"}
        # --request-rate inf behind --max-concurrency 8, each request timed from its slot: a closed loop
        assert s["conditions"]["load"] == {"concurrency": 8, "arrival": "closed loop"}
        assert any("ITL" in d and "first token" in d for d in r.definitions)

    def test_appended_results_are_stages(self, tmp_path):
        """``--append-result`` lines are load points: stages and a curve."""
        lines = []
        for rate, p99 in ((2.0, 100.0), (4.0, 180.0)):
            d = raw(VLLM) | {"request_rate": rate, "p99_ttft_ms": p99}
            lines.append(json.dumps(d))
        path = tmp_path / "sweep.json"
        path.write_text("\n".join(lines))
        s = load_peer_result(path).summary
        assert [st["name"] for st in s["stages"]] == ["rate=2", "rate=4"]
        assert [p["ttft_ms"]["p99"] for p in s["curve"]["points"]] == [100.0, 180.0]
        assert s["counts"]["ok"] == 2 * 198
        assert lookup(s, "ttft_ms", "p99") is None  # percentiles of two loads do not pool


class TestGuidellm:
    def test_a_sweep_is_stages_with_the_files_numbers(self):
        r = load_peer_result(GUIDELLM)
        s, b = r.summary, raw(GUIDELLM)["benchmarks"]
        assert (r.tool, r.name, r.version) == ("GuideLLM", "guidellm", "0.6.0")
        assert [st["name"] for st in s["stages"]] == ["synchronous", "throughput", "constant@7.215"]
        st = s["stages"][2]
        m = b[2]["metrics"]
        assert (
            st["metrics"]["ttft_ms"]["p99"]
            == 141.66
            == m["time_to_first_token_ms"]["successful"]["percentiles"]["p99"]
        )
        # GuideLLM's ITL is the TPOT formula: it fills tpot_ms, and itl_ms stays empty.
        assert st["metrics"]["tpot_ms"]["p99"] == 23.87
        assert "itl_ms" not in st["metrics"]
        assert st["metrics"]["e2e_ms"]["p50"] == 2.489 * 1000
        assert st["metrics"]["output_tokens_per_s"] == 912.6
        assert st["metrics"]["request_throughput_rps"] == 7.13
        assert st["load"]["rate"] == 7.215
        assert (st["counts"]["sent"], st["counts"]["ok"], st["counts"]["failed"]) == (214, 214, 0)
        assert s["stages"][1]["counts"]["failed"] == 3
        assert (s["counts"]["sent"], s["counts"]["ok"], s["window"]["seconds"]) == (650, 647, 90.0)
        points = s["curve"]["points"]
        assert [p["throughput_rps"] for p in points] == [0.7, 13.73, 7.13]
        assert s["conditions"]["target"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"


class TestAiperf:
    def test_the_files_numbers(self):
        r = load_peer_result(AIPERF.parent)
        s = r.summary
        assert (r.tool, r.name, r.version) == ("AIPerf", "aiperf", "0.12.0")
        assert lookup(s, "ttft_ms", "p99") == 166.48
        assert lookup(s, "tpot_ms", "p99") == 23.71  # its inter_token_latency
        assert lookup(s, "itl_ms", "p99") == 29.84  # its inter_chunk_latency
        assert lookup(s, "e2e_ms", "mean") == 2712.45
        assert lookup(s, "ttft_ms", "p99_9") is None
        assert lookup(s, "output_tokens_per_s") == 746.9
        assert lookup(s, "request_throughput_rps") == 5.834
        assert (s["counts"]["sent"], s["counts"]["ok"], s["counts"]["failed"]) == (354, 350, 4)
        assert s["window"]["seconds"] == 59.993
        assert s["conditions"]["load"] == {"concurrency": 16, "arrival": "closed loop"}
        assert s["conditions"]["target"]["model"] == "Qwen/Qwen3-0.6B"

    def test_latencies_in_seconds_are_converted(self, tmp_path):
        data = raw(AIPERF)
        data["time_to_first_token"] = {"unit": "sec", "avg": 0.1, "p99": 0.2}
        (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(data))
        s = load_peer_result(tmp_path).summary
        assert (lookup(s, "ttft_ms", "mean"), lookup(s, "ttft_ms", "p99")) == (100.0, 200.0)


class TestInferencePerf:
    def test_the_summary_and_its_stages(self):
        r = load_peer_result(INFERENCE_PERF.parent)
        s = r.summary
        assert (r.tool, r.name) == ("inference-perf", "inference_perf")
        assert lookup(s, "ttft_ms", "p99") == pytest.approx(153.02)  # 0.15302 s
        assert lookup(s, "tpot_ms", "p50") == pytest.approx(4.19)
        assert lookup(s, "itl_ms", "p99_9") == pytest.approx(19.7)
        assert lookup(s, "output_tokens_per_s") == 128.48
        assert (s["counts"]["sent"], s["counts"]["ok"], s["counts"]["failed"]) == (300, 298, 2)
        assert s["window"]["seconds"] == 298 / 2.05966
        assert [st["name"] for st in s["stages"]] == ["rate=1", "rate=4"]
        st = s["stages"][1]
        assert st["metrics"]["ttft_ms"]["p99"] == pytest.approx(155.21)
        assert st["metrics"]["request_throughput_rps"] == 3.96412
        assert (st["counts"]["ok"], st["counts"]["failed"]) == (238, 2)

    def test_one_stage_file_alone_is_one_point(self):
        s = load_peer_result(INFERENCE_PERF.parent / "stage_0_lifecycle_metrics.json").summary
        assert "stages" not in s
        assert s["conditions"]["load"] == {"rate": 1.0, "achieved_rate": 1.0048}


class TestMalformed:
    @pytest.mark.parametrize(
        ("source", "name", "drop", "field"),
        [
            (VLLM, "vllm.json", ("completed",), "completed"),
            (
                GUIDELLM,
                "benchmarks.json",
                ("benchmarks", 1, "metrics", "request_totals"),
                "benchmarks.1.metrics.request_totals",
            ),
            (AIPERF, "profile_export_aiperf.json", ("request_count",), "request_count"),
            (INFERENCE_PERF, "summary_lifecycle_metrics.json", ("failures", "count"), "failures.count"),
        ],
    )
    def test_a_missing_field_is_named(self, tmp_path, source, name, drop, field):
        """A file of a known layout missing a field its reader needs: a ResultError naming both."""
        data = raw(source)
        node = data
        for key in drop[:-1]:
            node = node[key]
        del node[drop[-1]]
        path = tmp_path / name
        path.write_text(json.dumps(data))
        with pytest.raises(ResultError) as err:
            load_peer_result(path)
        assert str(path) in str(err.value) and f"field {field} " in str(err.value)
        assert "\n" not in str(err.value)

    def test_an_unknown_file_is_a_result_error(self, tmp_path):
        (tmp_path / "x.json").write_text("[1, 2]")
        with pytest.raises(ResultError, match="not a result file of a tool loadgen reads"):
            load_peer_result(tmp_path / "x.json")


class TestInCompare:
    def test_peer_rows_definitions_and_conditions(self, tmp_path):
        """Beside a loadgen run: the file's numbers in the table, its definitions, and a
        condition diff that lists the source and only what the file records."""
        cmp = loadgen.compare([RUNS / "base-a", AIPERF])
        assert cmp.names == ("base-a", "aiperf")
        assert cmp.table.at["ttft_ms p99", "aiperf"] == 166.48
        assert cmp.table.at["output_tokens_per_s", "aiperf"] == 746.9
        assert cmp.table.at["failed", "aiperf"] == 4
        diff = {d.field: d.values for d in cmp.conditions}
        assert diff["source"] == ("loadgen", "AIPerf 0.12.0 (results file)")
        assert diff["target.model"] == ("test-model", "Qwen/Qwen3-0.6B")
        assert diff["load.concurrency"] == (8, 16)
        # Recorded by the loadgen run alone: not a difference.
        assert "load.arrival" not in diff and "client.python" not in diff
        assert any("aiperf: a results file of AIPerf" in w for w in cmp.warnings)
        cdfs = cmp.cdfs()
        assert cdfs["ttft_ms"]["aiperf"][2] == 0 and cdfs["ttft_ms"]["base-a"][2] == 120
        md = compare_report.markdown(cmp)
        assert "## Definitions that differ" in md
        assert "| ttft_ms p99 | 54.88 | 166.5 | +203.3% |" in md
        assert "- AIPerf: its ITL (`inter_token_latency`) is (E2E - TTFT)" in md
        out = cmp.to_dict()
        assert out["peer_results"]["aiperf"]["tool"] == "AIPerf"
        assert out["runs"][1]["tool"] == "AIPerf"

    def test_a_field_the_file_does_not_record(self):
        """Two loadgen runs that differ in a field the peer's file does not state: listed, the
        peer's cell "(not recorded)"."""
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "other-workload", AIPERF])
        diff = {d.field: d.values for d in cmp.conditions}
        assert diff["lengths.requested.output_tokens.value"] == (24, 48, NOT_RECORDED)
        assert diff["load.concurrency"] == (8, 8, 16)

    def test_two_loadgen_runs_compare_as_before(self):
        out = loadgen.compare([RUNS / "base-a", RUNS / "base-b"]).to_dict()
        assert "peer_results" not in out and all("tool" not in r for r in out["runs"])

    def test_a_guidellm_sweep_gives_curves(self, tmp_path):
        folder = tmp_path / "guidellm-q3"
        shutil.copytree(GUIDELLM.parent, folder)
        cmp = loadgen.compare([RUNS / "base-a", folder])
        assert cmp.curves is not None
        run = cmp.curves.runs[1]
        assert run.name == "guidellm-q3" and run.multi_stage
        assert [p["ttft_ms"]["p99"] for p in run.points] == [47.92, 5012.88, 141.66]
        written = compare_report.write(cmp, tmp_path / "out")
        assert tmp_path / "out" / "curve_ttft_ms_p99.png" in written
