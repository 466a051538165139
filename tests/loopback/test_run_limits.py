"""What a user trips on when a run's limits, shape and lines say less than they should: which
limit ended the run, a command-line limit replacing the profile's other one, a trace replay's
load line, the prefix-cache line only where a prefix was shared, and a sweep's warm-up that
scales with its stages (a stage with no measured request has no verdict, and says why)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.cli.console import traffic_lines as console_lines
from loadgen.cli.main import build_parser
from loadgen.cli.parser import overrides
from loadgen.config.stages import sweep_warmup

from helpers import cli

REPO = Path(__file__).resolve().parents[2]
SIM = "llama3-8b-fp16@h100"


def parsed(*args: str):
    return build_parser().parse_args(["run", "quickstart", *args])


class TestLimitsFromTheCommandLine:
    def test_duration_alone_replaces_the_profiles_request_count(self):
        """--duration 60 on a profile with num_requests: the count is cleared, the time rules."""
        out = overrides(parsed("--duration", "60"))
        assert out["workload.duration_s"] == 60.0 and out["workload.num_requests"] is None

    def test_num_requests_alone_replaces_the_profiles_duration(self):
        out = overrides(parsed("--num-requests", "50"))
        assert out["workload.num_requests"] == 50 and out["workload.duration_s"] is None

    def test_both_given_keep_both(self):
        out = overrides(parsed("--num-requests", "50", "--duration", "60"))
        assert (out["workload.num_requests"], out["workload.duration_s"]) == (50, 60.0)

    def test_neither_given_changes_neither(self):
        out = overrides(parsed("--concurrency", "4"))
        assert "workload.num_requests" not in out and "workload.duration_s" not in out


@pytest.mark.slow  # a real-time run of several seconds
def test_the_summary_and_console_say_which_limit_ended_the_run(tmp_path):
    """Both limits set: 12 requests at c=4 end long before 60 s, and the run says the count did."""
    out = tmp_path / "reports"
    cmd = [
        "run",
        str(REPO / "profiles" / "ci-smoke.yaml"),
        "--sim",
        SIM,
        "--out",
        str(out),
        "--num-requests",
        "12",
        "--duration",
        "60",
        "--warmup",
        "0",
    ]
    res = cli(*cmd, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    (run_dir,) = out.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    ended = summary["ended_by"]
    assert ended["limit"] == "num_requests"
    assert ended["text"].startswith("workload.num_requests: 12 requests sent, in ")
    assert ended["text"].endswith(", before workload.duration_s (60 s)")
    assert f"ended   {ended['text']}" in res.stdout


CACHE = {"server": {"prefix_cache": {"hit_rate": 0.0, "hits": 0, "queries": 9000}}}


class TestPrefixCacheLine:
    def test_not_printed_when_nothing_was_shared_and_nothing_hit(self):
        summary = {**CACHE, "conditions": {"traffic": {"source": "synthetic"}}}
        assert console_lines(summary) == []

    @pytest.mark.parametrize(
        "traffic",
        [
            {"source": "synthetic", "prefix": {"shared_tokens": 256, "groups": 1}},
            {"source": "synthetic", "sessions": {"turns": 3}},
            {"source": "trace", "trace": {"designed_prefix_reuse": 0.4}},
        ],
        ids=["shared prefix", "sessions", "trace reuse"],
    )
    def test_printed_when_a_prefix_was_shared_even_at_zero(self, traffic):
        summary = {**CACHE, "conditions": {"traffic": traffic}}
        assert console_lines(summary) == ["prefix cache  server hit rate 0.0% (0 of 9,000 prompt tokens)"]


class TestSweepWarmup:
    @pytest.mark.parametrize(
        "warmup, concurrency, rate, want",
        [
            (16, 1, None, 1),
            (16, 4, None, 4),
            (16, 64, None, 16),
            (16, None, 2.5, 3),
            (16, None, 40.0, 16),
            (0, 8, None, 0),
            (16, None, 0.2, 1),
        ],
    )
    def test_one_per_slot_or_a_second_of_arrivals_at_most(self, warmup, concurrency, rate, want):
        assert sweep_warmup(warmup, concurrency, rate) == want


@pytest.mark.slow  # a real-time run of several seconds
def test_a_sweep_of_short_stages_measures_every_stage(tmp_path):
    """quickstart's 16 warm-up requests filled the whole 6 s c=1 stage, which was listed as
    'fail' with no figures; with the warm-up scaled per stage every stage measures requests and
    has a verdict."""
    out = tmp_path / "reports"
    cmd = [
        "run",
        "quickstart",
        "--sweep",
        "concurrency=1,4",
        "--stage-duration",
        "3s",
        "--out",
        str(out),
        "--no-report",
        "--no-progress",
    ]
    res = cli(*cmd, cwd=tmp_path, timeout=180)
    assert res.returncode == 0, res.stderr
    (run_dir,) = out.iterdir()
    stages = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert [s["counts"]["warmup"] for s in stages] == [1, 4]
    assert all(s["counts"]["sent"] > 0 and s["sla"]["verdict"] in ("pass", "fail") for s in stages)


def test_a_stage_of_only_warm_up_has_no_verdict_and_says_why():
    from loadgen.analysis.metrics import summarize
    from loadgen.records import RequestRecord

    rec = RequestRecord(
        id=0,
        warmup=True,
        t_sched_ns=0,
        t_send_ns=0,
        requested_output_tokens=4,
        requested_prompt_tokens=4,
        ok=True,
        t_first_token_ns=10,
        t_end_ns=20,
    )

    class Rule:
        metric, stat, op, threshold = "ttft_ms", "p99", "<", 700.0

        def text(self) -> str:
            return "p99 ttft_ms < 700"

    class Sla:
        ttft_ms = tpot_ms = e2e_ms = None
        rules = (Rule(),)
        max_error_rate = 0.01

    block = summarize([rec], sla=Sla())["sla"]
    assert block["verdict"] == "none"
    assert block["no_verdict"] == "no measured request: every request sent was warm-up"


@pytest.mark.slow  # a real-time run of several seconds
def test_a_trace_replay_says_what_it_replays(tmp_path):
    """The load line of a trace replay names the file, the requests, the span as replayed and
    the time scale (it read "open loop, None req/s poisson"), and the run says the trace ended it."""
    out = tmp_path / "reports"
    cmd = [
        "run",
        "replay",
        "--set",
        "workload.trace.window_s=5",
        "--set",
        "workload.trace.time_scale=0.5",
        "--out",
        str(out),
        "--no-report",
        "--no-progress",
    ]
    res = cli(*cmd, cwd=tmp_path, timeout=120)
    assert res.returncode in (0, 1), res.stderr
    (run_dir,) = out.iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    trace = s["conditions"]["traffic"]["trace"]
    line = " ".join(res.stdout.split())  # the console wraps at 110 columns
    assert (
        f"load trace replay {trace['path']}: {trace['requests']} requests over "
        f"{trace['span_s'] * 0.5:.1f} s (the trace's {trace['span_s']:.1f} s, time scale 0.5)"
    ) in line
    assert "None req/s" not in line
    assert s["ended_by"] == {
        "limit": "trace",
        "text": f"the trace's end ({s['counts']['sent']} requests sent)",
    }


def test_the_console_fails_the_sla_on_failed_requests_and_says_why_first(tmp_path):
    """ci-smoke's latency rules judge the ok requests only; against a server that fails every
    request the console says FAIL with the count and the class first, and labels the
    latency table as of the ok requests."""
    from loadgen.testing.hostile import HostileServer

    with HostileServer("http_500") as srv:
        out = tmp_path / "reports"
        cmd = [
            "run",
            str(REPO / "profiles" / "ci-smoke.yaml"),
            "--url",
            srv.url,
            "--num-requests",
            "6",
            "--warmup",
            "0",
            "--out",
            str(out),
            "--no-report",
        ]
        res = cli(*cmd, cwd=tmp_path, timeout=120)
    # Nothing was served: exit 3 without --fail-on-sla, the server's words on the last line.
    assert res.returncode == 3, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "loadgen: nothing was served: 6 of 6 requests failed (http_500 6); the server said http_500 "
        '"hostile server: internal error"'
    )
    text = " ".join(res.stdout.split())
    assert "SLA FAIL: 6 of 6 requests failed (http_500 6): error rate 100.0% > max_error_rate 1.0%" in text
    assert "latency (ms) of the ok requests only (6 failed)" in text
