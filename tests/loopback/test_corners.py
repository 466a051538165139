"""The four corners that open every report (latency, throughput, quality, memory and cost), the
sessions section and the traffic condition: rows from literal summaries, then real runs of the
built-in simulator, whose summaries must also validate against schemas/summary.schema.json."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from loadgen.analysis.cost import CostInputs, cost_figures
from loadgen.quality.tasks import TaskSet
from loadgen.report import write_report
from loadgen.report.corners import corner_rows
from loadgen.report.traffic import sessions_section, traffic_text
from loadgen.sim import SimConfig, answers

from helpers import profile, run

ROOT = Path(__file__).parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "summary.schema.json").read_text())

FULL = {
    "metrics": {
        "ttft_ms": {"count": 40, "p50": 52.764, "p99": 54.883},
        "tpot_ms": {"count": 40, "p50": 10.01, "p99": 10.14},
        "itl_ms": {"count": 900, "p50": 9.97, "p99": 11.65},
        "request_throughput_rps": 28.19,
        "output_tokens_per_s": 1676.449,
        "total_tokens_per_s": 3000.0,
        "goodput": {"requests_per_s": 27.5, "output_tokens_per_s": 1600.0, "attained_fraction": 0.975},
    },
    "quality": {
        "scored": 40,
        "correct": 30,
        "accuracy": 0.75,
        "answers_kept": 40,
        "answers_truncated": 2,
        "max_chars": 2048,
    },
    "server": {
        "gauges": {"kv_cache_usage": {"mean": 0.4213, "max": 0.9, "samples": 12}},
        "prefix_cache": {"queries": 30300, "hits": 22784, "hit_rate": 22784 / 30300},
    },
    "telemetry": {
        "gpus": [{"memory_used_peak_bytes": 17.24e9}, {"memory_used_peak_bytes": 16.9e9}],
        "energy": {
            "j_per_output_token": 0.24172,
            "mean_watts": 810.4,
            "gpus": 2,
            "price_per_kwh": 0.15,
            "kwh": 0.00055,
            "usd_per_million_output_tokens": 0.01007,
            "usd_per_million_total_tokens": 0.0033,
        },
    },
}
BARE = {
    "metrics": {
        "ttft_ms": {"count": 3, "p50": 100.0, "p99": 120.0},
        "tpot_ms": {"count": 0, "p50": None, "p99": None},
        "itl_ms": {"count": 0, "p50": None, "p99": None},
        "request_throughput_rps": 1.5,
        "output_tokens_per_s": 1.5,
        "goodput": {"requests_per_s": 1.5, "attained_fraction": 1.0},
    },
    "server": {"available": False, "gauges": {}},
}


def rows(summary: dict, cost: dict | None = None) -> dict[str, str]:
    return dict(corner_rows(summary, cost))


class TestCornerRows:
    def test_every_corner_of_a_full_summary(self):
        """Latency tails, throughput with goodput, accuracy with its count and kept answers,
        KV cache, prefix-cache hits, the GPUs' energy per token, power, peak memory and
        electricity, and the price of a million output tokens."""
        cost = cost_figures(FULL, CostInputs(3.6, 2, "label gpu_hour_cost", "label gpu_count"))
        assert rows(FULL, cost) == {
            "latency": "TTFT p50 52.76 ms, p99 54.88 ms; TPOT p50 10.01 ms, p99 10.14 ms",
            "throughput": "1,676.45 output tokens/s, 28.19 requests/s; goodput 27.50 requests/s "
            "(97.5% met every SLO)",
            "quality": "accuracy 75.0% (30 of 40 scored answers right); 40 answers kept (2 cut at 2048 "
            "characters) for `loadgen compare`'s output agreement",
            "memory and cost": "KV cache 42.1% mean, 90.0% max; prefix-cache hit rate 75.2% (22,784 of "
            "30,300 prompt tokens); 0.242 J per output token, 810 W mean over 2 GPUs, GPU memory peak "
            "17.2 GB, energy $0.01007 per million output tokens; $1.193 per million output tokens",
        }

    def test_a_corner_not_measured_says_how_to_measure_it(self):
        """No TPOT (one-token answers): ITL instead, and none of it either: TTFT alone; no
        expected answers, no /metrics, no GPU read, no GPU price: each says so and names the way
        to get it."""
        assert rows(BARE) == {
            "latency": "TTFT p50 100.00 ms, p99 120.00 ms",
            "throughput": "1.50 output tokens/s, 1.50 requests/s; goodput 1.50 requests/s "
            "(100.0% met every SLO)",
            "quality": "not measured: no expected answers (see profiles/quality.yaml)",
            "memory and cost": "KV cache not measured (the server's /metrics gave no KV-cache usage); "
            "GPU energy not measured (no telemetry sources configured; set telemetry.dcgm or "
            "telemetry.nvml); cost not computed: give a GPU-hour price (loadgen report "
            "--gpu-hour-cost USD, or --label gpu_hour_cost=USD when running)",
        }

    def test_itl_stands_in_for_tpot_and_kept_answers_are_said_without_scores(self):
        summary = {**BARE, "quality": {"scored": 0, "accuracy": None, "answers_kept": 3, "max_chars": 4096}}
        summary["metrics"] = {**BARE["metrics"], "itl_ms": {"count": 6, "p50": 8.0, "p99": 9.5}}
        r = rows(summary)
        assert r["latency"] == "TTFT p50 100.00 ms, p99 120.00 ms; ITL (per chunk) p50 8.00 ms, p99 9.50 ms"
        assert r["quality"] == (
            "not measured: no expected answers (see profiles/quality.yaml); 3 answers kept for "
            "`loadgen compare`'s output agreement"
        )


class TestTraffic:
    def test_synthetic_prompts_add_no_condition(self):
        assert traffic_text({"source": "synthetic", "prefix": {"shared_tokens": 8}}) is None
        assert traffic_text(None) is None

    def test_agent_sessions_say_their_kind_and_file(self):
        generated = {"source": "synthetic", "agentic": {"kind": "code_session", "path": None}}
        assert (
            traffic_text(generated) == "agent sessions (code_session): each round built from the last answer"
        )
        dag = {"source": "synthetic", "agentic": {"kind": "otlp", "path": "traces/dag.json"}}
        assert (
            traffic_text(dag)
            == "agent sessions (otlp from traces/dag.json): each round built from the last answer"
        )

    def test_dataset_and_trace_lines(self):
        dataset = {"source": "dataset", "dataset": {"path": "data/s.json", "format": "auto", "entries": 60}}
        assert traffic_text(dataset) == "dataset data/s.json (auto, 60 entries)"
        trace = {
            "source": "trace",
            "trace": {
                "path": "traces/m.jsonl",
                "format": "mooncake",
                "requests": 141,
                "span_s": 29.75,
                "block_tokens": 512,
                "designed_prefix_reuse": 0.4663,
            },
            "prefix": {"shared_tokens": 64, "groups": 2, "fraction": 0.5},
        }
        assert traffic_text(trace) == (
            "trace traces/m.jsonl (mooncake): 141 requests over 29.75 s; designed prefix reuse 46.6% "
            "(blocks of 512 tokens); shared prefix of 64 tokens in 2 group(s), 50.0% of requests"
        )

    def test_sessions_table_is_ttft_by_turn(self):
        block = {
            "sessions": 2,
            "turns_per_session": {"count": 2, "mean": 2.5, "max": 3.0},
            "failed_turns": 1,
            "by_turn": [
                {
                    "turn": 1,
                    "requests": 2,
                    "ttft_ms": {"count": 2, "mean": 60.0, "p50": 60.0, "p90": 61.0, "p99": 61.9},
                    "prompt_tokens_mean": 684.5,
                },
                {
                    "turn": "16+",
                    "requests": 1,
                    "ttft_ms": {"count": 1, "mean": 14.0, "p50": 14.0, "p90": 14.0, "p99": 14.0},
                    "prompt_tokens_mean": None,
                },
            ],
        }
        section = sessions_section({"sessions": block})
        assert section is not None and section.title == "Sessions"
        assert section.blocks[0].text.startswith(
            "2 sessions, 2.50 turns each on average (at most 3); 1 failed turns."
        )
        assert section.blocks[1].rows == (
            ("1", "2", "60.00", "61.00", "61.90", "60.00", "684.5"),
            ("16+", "1", "14.00", "14.00", "14.00", "14.00", "-"),
        )
        assert sessions_section({}) is None


def sim_run(out: Path, **overrides) -> Path:
    """A short real-time run of the built-in simulator (no URL), report written."""
    base = {
        "target.endpoint": "chat",
        "sim": {"preset": "llama3-8b-fp16@h100", "time_scale": 1.0, "seed": 1},
        "workload.num_requests": 12,
        "workload.input_tokens": 48,
        "load.concurrency": 4,
        "load.warmup_requests": 0,
        "output.dir": str(out),
    }
    run_dir = run(profile(out, None, **{**base, **overrides})).run_dir
    write_report(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory) -> dict[str, Path]:
    """sessions: 2-turn conversations, answers not kept; tasks: the built-in task set, answers
    kept and scored (the simulator answers them right at its preset's modelled accuracy)."""
    out = tmp_path_factory.mktemp("sim")
    return {
        "sessions": sim_run(out, workload__sessions={"turns": 2}),
        "tasks": sim_run(out, workload__tasks={}, target__ignore_eos=False, output__answers={"keep": True}),
    }


def report_lines(run_dir: Path) -> list[str]:
    return (run_dir / "report.md").read_text().splitlines()


@pytest.mark.slow
class TestRealRuns:
    @pytest.mark.slow
    def test_the_report_opens_with_the_four_corners(self, sim_runs):
        """The first section's first table is the four corners, in both reports."""
        for run_dir in sim_runs.values():
            lines = report_lines(run_dir)
            assert lines[2:6] == ["## At a glance", "", "| four corners | this run |", "| --- | --- |"]
            assert [ln.split(" | ")[0] for ln in lines[6:10]] == [
                "| latency",
                "| throughput",
                "| quality",
                "| memory and cost",
            ]
            html = (run_dir / "report.html").read_text()
            assert html.index("<th>four corners</th>") < html.index(">Conditions</h2>")

    @pytest.mark.slow
    def test_without_quality_the_corner_says_how_to_measure_it(self, sim_runs):
        lines = report_lines(sim_runs["sessions"])
        assert "| quality | not measured: no expected answers (see profiles/quality.yaml) |" in lines
        memory = next(ln for ln in lines if ln.startswith("| memory and cost | "))
        assert memory.startswith("| memory and cost | KV cache ")
        assert "; prefix-cache hit rate " in memory and "; cost not computed: " in memory

    @pytest.mark.slow
    def test_with_quality_the_corner_gives_accuracy_and_kept_answers(self, sim_runs):
        summary = json.loads((sim_runs["tasks"] / "summary.json").read_text())
        q = summary["quality"]
        config = SimConfig.from_dict({"preset": "llama3-8b-fp16@h100", "seed": 1})
        tasks = TaskSet(summary["conditions"]["seed"])
        right = sum(answers.answer(config, tasks.task(i).prompt) == tasks.task(i).expected for i in range(12))
        assert (q["scored"], q["correct"], q["answers_kept"], q["answers_truncated"]) == (12, right, 12, 0)
        corner = next(ln for ln in report_lines(sim_runs["tasks"]) if ln.startswith("| quality | "))
        assert corner.startswith(
            f"| quality | accuracy {right / 12:.1%} ({right} of 12 scored answers right), "
            "modelled by the simulator, not measured: "
        )
        assert corner.endswith("; 12 answers kept for `loadgen compare`'s output agreement |")

    @pytest.mark.slow
    def test_sessions_and_traffic_sections(self, sim_runs):
        """The sessions run has TTFT by turn after the latency table; the tasks run names its
        source in the conditions, after the requests row."""
        heads = [ln for ln in report_lines(sim_runs["sessions"]) if ln.startswith("## ")]
        assert heads[heads.index("## Latency") + 1] == "## Sessions"
        lines = report_lines(sim_runs["sessions"])
        body = lines[lines.index("## Sessions") + 1 : lines.index("## Throughput")]
        table = [ln.split(" | ") for ln in body if ln.startswith("| ")]
        assert table[0][:2] == ["| turn", "requests"]
        assert [row[0] for row in table[2:]] == ["| 1", "| 2"]
        assert sum(int(row[1]) for row in table[2:]) == 12
        tasks = report_lines(sim_runs["tasks"])
        at = tasks.index("| traffic | built-in tasks with exact answers (arithmetic, copy, recall) |")
        assert tasks[at - 1].startswith("| requests | ")
        assert "## Sessions" not in tasks

    @pytest.mark.slow
    @pytest.mark.parametrize("name", ["sessions", "tasks"])
    def test_the_summaries_validate_against_the_schema(self, sim_runs, name):
        """quality, sessions, conditions.traffic and server.prefix_cache are all described."""
        summary = json.loads((sim_runs[name] / "summary.json").read_text())
        present = {
            "sessions": ("sessions", "prefix_cache"),
            "tasks": ("quality", "prefix_cache"),
        }[name]
        for key in present:
            assert key in summary or key in summary["server"]
        assert "traffic" in summary["conditions"]
        validator = jsonschema.Draft202012Validator(SCHEMA)
        assert [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(summary)] == []
