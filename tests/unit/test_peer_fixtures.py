"""Real result files of AIPerf 0.13.0, GuideLLM 0.8.1 and inference-perf 0.7.0 (each run against
loadgen's simulator: tests/fixtures/peer_results/README.md), read by ``compare``: every figure
of the file that loadgen has a row for is on that row, equal to the value the test parses out
of the file itself, and every row the file has no figure for stays empty."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import loadgen
from loadgen.analysis.compare_peers import PER_STAGE
from loadgen.analysis.peer_results import load_peer_result
from loadgen.metric_defs import lookup
from loadgen.report import compare as compare_report

PEERS = Path(__file__).parents[1] / "fixtures" / "peer_results"
BASE = Path(__file__).parents[1] / "fixtures" / "runs" / "base-a"
AIPERF = PEERS / "aiperf" / "aiperf-0.13.0-c4"
GUIDELLM_C4 = PEERS / "guidellm" / "guidellm-0.8.1-c4"
GUIDELLM_SWEEP = PEERS / "guidellm" / "guidellm-0.8.1-sweep"
IPERF_C = PEERS / "inference_perf" / "inference-perf-0.7.0-concurrent"
IPERF_P = PEERS / "inference_perf" / "inference-perf-0.7.0-poisson"
STATS = ("p50", "p90", "p95", "p99", "p99_9", "mean")


def raw(path: Path) -> dict:
    return json.loads(path.read_text())


def column(path: Path) -> dict[str, float]:
    """The peer's column of ``compare``'s table beside a loadgen run (NaN cells left out)."""
    cmp = loadgen.compare([BASE, path])
    col = cmp.table[cmp.names[1]]
    return {row: v for row, v in col.items() if not math.isnan(v)}


def expect_rows(col: dict[str, float], expected: dict[str, float]) -> None:
    """Every row the file fills equals the file's value; every other row is empty."""
    assert set(col) == set(expected)
    for row, value in expected.items():
        assert col[row] == pytest.approx(value, rel=1e-12), row


class TestAiperf013:
    def test_every_figure_is_the_files(self):
        """Each AIPerf tag loadgen has a row for, on that row (ITL on tpot_ms, ICL on itl_ms)."""
        d = raw(AIPERF / "profile_export_aiperf.json")
        expected = {}
        tags = {
            "ttft_ms": "time_to_first_token",
            "itl_ms": "inter_chunk_latency",
            "tpot_ms": "inter_token_latency",
            "e2e_ms": "request_latency",
        }
        for metric, tag in tags.items():
            for stat in ("p50", "p90", "p95", "p99"):
                expected[f"{metric} {stat}"] = d[tag][stat]
            expected[f"{metric} mean"] = d[tag]["avg"]
        expected |= {
            "request_throughput_rps": d["request_throughput"]["avg"],
            "input_tokens_per_s": d["input_token_throughput"]["avg"],
            "output_tokens_per_s": d["output_token_throughput"]["avg"],
            "total_tokens_per_s": d["total_token_throughput"]["avg"],
            "mean_concurrency": d["effective_concurrency"]["avg"],
            "sent": d["completed_request_count"]["avg"],
            "ok": d["request_count"]["avg"],
            "failed": 0,  # no error_request_count: none failed (error_summary is [])
            "error_rate": 0,
        }
        assert d["error_summary"] == [] and "error_request_count" not in d
        expect_rows(column(AIPERF), expected)

    def test_labels_and_conditions_are_where_aiperf_writes_them(self):
        r = load_peer_result(AIPERF)
        d = raw(AIPERF / "profile_export_aiperf.json")
        assert (
            (r.version, r.summary["run_id"])
            == (d["aiperf_version"], d["benchmark_id"])
            == ("0.13.0", d["benchmark_id"])
        )
        assert r.name == "aiperf-0.13.0-c4"  # its artifact folder
        c = r.summary["conditions"]
        assert c["target"] == {
            "url": "http://127.0.0.1:18777",
            "endpoint": "chat",
            "model": d["input_config"]["models"]["items"][0]["name"],
        }
        assert c["load"] == {"concurrency": 4, "arrival": "closed loop"}
        out = c["lengths"]["realised"]["server_output_tokens"]
        assert (out["mean"], out["p99"]) == (
            d["usage_completion_tokens"]["avg"],
            d["usage_completion_tokens"]["p99"],
        )
        assert r.summary["window"]["seconds"] == d["benchmark_duration"]["avg"]


class TestGuidellm081:
    def test_one_benchmark_every_figure_is_the_files(self):
        """A concurrent run of one benchmark: its successful figures on loadgen's rows."""
        m = raw(GUIDELLM_C4 / "benchmarks.json")["benchmarks"][0]["metrics"]
        expected = {}
        for metric, (name, scale) in {
            "ttft_ms": ("time_to_first_token_ms", 1),
            "tpot_ms": ("inter_token_latency_ms", 1),
            "e2e_ms": ("request_latency", 1000),
        }.items():
            ok = m[name]["successful"]
            pct = ok["percentiles"]
            for stat, key in zip(STATS, ("p50", "p90", "p95", "p99", "p999")):
                expected[f"{metric} {stat}"] = pct[key] * scale
            expected[f"{metric} mean"] = ok["mean"] * scale
        expected |= {
            "request_throughput_rps": m["requests_per_second"]["successful"]["mean"],
            "input_tokens_per_s": m["prompt_tokens_per_second"]["successful"]["mean"],
            "output_tokens_per_s": m["output_tokens_per_second"]["successful"]["mean"],
            "total_tokens_per_s": m["tokens_per_second"]["successful"]["mean"],
            "mean_concurrency": m["request_concurrency"]["successful"]["mean"],
            "sent": m["request_totals"]["total"],
            "ok": m["request_totals"]["successful"],
            "failed": m["request_totals"]["errored"],
            "error_rate": 0,
        }
        expect_rows(column(GUIDELLM_C4), expected)
        r = load_peer_result(GUIDELLM_C4)
        assert r.summary["conditions"]["load"] == {"concurrency": 4, "arrival": "closed loop"}
        assert (r.version, r.source) == ("0.8.1", "GuideLLM 0.8.1 (results file)")

    def test_a_sweep_is_stages_and_its_pooled_row_says_per_stage(self):
        """Each benchmark a stage with its own figures; the whole file: exact sums, rates over
        the summed windows and latency means; its percentile cells read "per stage"."""
        bs = raw(GUIDELLM_SWEEP / "benchmarks.json")["benchmarks"]
        r = load_peer_result(GUIDELLM_SWEEP)
        s = r.summary
        assert [st["name"] for st in s["stages"]] == [
            "synchronous",
            "throughput",
            "constant@93.2",
            "constant@177.8",
        ]
        for st, b in zip(s["stages"], bs):
            m = b["metrics"]
            assert (
                lookup(st, "ttft_ms", "p99")
                == m["time_to_first_token_ms"]["successful"]["percentiles"]["p99"]
            )
            assert (
                lookup(st, "e2e_ms", "p50") == m["request_latency"]["successful"]["percentiles"]["p50"] * 1000
            )
            assert lookup(st, "request_throughput_rps") == m["requests_per_second"]["successful"]["mean"]
            assert st["window"]["seconds"] == b["duration"]
        assert s["stages"][2]["load"] == {
            "rate": bs[2]["config"]["strategy"]["rate"],
            "arrival": "constant",
            "max_concurrency": 512,
        }
        ttft = [b["metrics"]["time_to_first_token_ms"]["successful"] for b in bs]
        col = column(GUIDELLM_SWEEP)
        assert col["ttft_ms mean"] == pytest.approx(
            sum(t["total_sum"] for t in ttft) / sum(t["count"] for t in ttft)
        )
        assert col["ok"] == sum(b["metrics"]["request_totals"]["successful"] for b in bs) == 120
        assert col["request_throughput_rps"] == pytest.approx(120 / sum(b["duration"] for b in bs))
        assert not any(row.endswith(("p50", "p99")) for row in col)
        cmp = loadgen.compare([BASE, GUIDELLM_SWEEP])
        md = compare_report.markdown(cmp)
        assert f"| ttft_ms p99 | 54.88 | {PER_STAGE} |" in md
        assert any("4 load points" in w and "do not pool" in w for w in cmp.warnings)


class TestInferencePerf070:
    @staticmethod
    def expected(report: dict) -> dict[str, float]:
        s = report["successes"]
        out = {}
        for metric, name in {
            "ttft_ms": "time_to_first_token",
            "tpot_ms": "time_per_output_token",
            "itl_ms": "inter_token_latency",
            "e2e_ms": "request_latency",
        }.items():
            d = s["latency"][name]
            for stat, key in zip(STATS, ("median", "p90", "p95", "p99", "p99.9", "mean")):
                out[f"{metric} {stat}"] = d[key] * 1000
        t = s["throughput"]
        out |= {
            "request_throughput_rps": t["requests_per_sec"],
            "input_tokens_per_s": t["input_tokens_per_sec"],
            "output_tokens_per_s": t["output_tokens_per_sec"],
            "total_tokens_per_s": t["total_tokens_per_sec"],
            "sent": report["load_summary"]["count"],
            "ok": s["count"],
            "failed": report["failures"]["count"],
            "error_rate": 0,
        }
        return out

    def test_the_summary_is_the_tools_own_pooled_figures(self):
        expect_rows(column(IPERF_C), self.expected(raw(IPERF_C / "summary_lifecycle_metrics.json")))

    @pytest.mark.parametrize(
        ("folder", "names"), [(IPERF_C, ["c=2", "c=4"]), (IPERF_P, ["rate=5", "rate=10"])]
    )
    def test_stages_keep_their_kind_and_their_figures(self, folder, names):
        """Concurrency stages by their concurrency (their requested_rate is derived), rate
        stages by their rate with config.yaml's arrival; each stage's figures its file's."""
        s = load_peer_result(folder).summary
        assert [st["name"] for st in s["stages"]] == names
        for i, st in enumerate(s["stages"]):
            report = raw(folder / f"stage_{i}_lifecycle_metrics.json")
            for row, value in self.expected(report).items():
                metric, _, stat = row.partition(" ")
                if metric not in ("sent", "ok", "failed", "error_rate"):
                    assert lookup(st, metric, stat or None) == pytest.approx(value, rel=1e-12), row
            assert st["window"]["seconds"] == report["benchmark_time_seconds"]
        loads = [st["load"] for st in s["stages"]]
        if folder == IPERF_C:
            assert [(ld["concurrency"], ld["arrival"]) for ld in loads] == [
                (2, "closed loop"),
                (4, "closed loop"),
            ]
        else:
            assert [(ld["rate"], ld["arrival"]) for ld in loads] == [(5.0, "poisson"), (10.0, "poisson")]

    def test_version_is_not_recorded_and_the_run_is_its_folder(self):
        r = load_peer_result(IPERF_C)
        assert (r.name, r.version, r.summary["run_id"]) == (
            "inference-perf-0.7.0-concurrent",
            None,
            "not recorded",
        )
        assert r.source == "inference-perf, version not recorded (results file)"
        assert r.summary["conditions"]["target"] == {
            "url": "http://127.0.0.1:18777",
            "endpoint": "completions",
            "model": "meta-llama/Meta-Llama-3-8B-Instruct",
        }
        summary = raw(IPERF_C / "summary_lifecycle_metrics.json")
        assert r.summary["window"]["seconds"] == summary["benchmark_time_seconds"]
        lengths = r.summary["conditions"]["lengths"]["realised"]
        assert (
            lengths["server_output_tokens"]["mean"] == summary["successes"]["output_tokens"]["mean"] == 16.0
        )
