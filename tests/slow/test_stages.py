"""Multi-stage runs against the built-in simulator, whose physics gives the truth: a
concurrency sweep saturates at the engine's batch cap and its knee sits there; ramps are
warm-up and stay out of every stage's window; every request belongs to exactly one stage; a
killed sweep keeps every finished record with its stage; a single stage keeps today's layout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.config import load_profile
from loadgen.config.stages import resolve_stages
from loadgen.result import load_records

import helpers
from helpers import run

REPO = Path(__file__).resolve().parents[2]
BATCH = 8  # the simulated engine's max_num_seqs: past it, requests queue


def sweep_profile(out: Path, sweep: dict, **extra) -> object:
    unset = dict.fromkeys(["workload.num_requests", "load.concurrency"])  # the sweep sets the load
    return helpers.profile(
        out,
        None,
        **{
            **unset,
            "sim.preset": "llama3-8b-fp16@h100",
            "sim.max_num_seqs": BATCH,
            "workload.input_tokens": 128,
            "workload.output_tokens": 32,
            "load.sweep": sweep,
            "sla.ttft_ms": 100.0,
            "sla.rules": ["p99 ttft_ms < 100"],
            "output.dir": str(out),
            "server_metrics.enabled": False,
            **extra,
        },
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """c = 2, 4, 8, 16, 32 on an engine with a batch cap of 8, 3 s a stage."""
    out = tmp_path_factory.mktemp("sweep")
    return run(
        sweep_profile(
            out,
            {"concurrency": [2, 4, 8, 16, 32], "stage_duration_s": 3.0},
            **{"load.warmup_requests": 4},
        )
    )


@pytest.mark.slow
class TestConcurrencySweep:
    def test_throughput_rises_then_saturates_at_the_batch_cap(self, sweep):
        """Below the cap each doubling of users nearly doubles throughput; past it, none does."""
        tput = [p["throughput_rps"] for p in sweep.summary["curve"]["points"]]
        assert tput[1] > 1.6 * tput[0] and tput[2] > 1.6 * tput[1]  # 2 -> 4 -> 8
        assert tput[3] < 1.25 * tput[2] and tput[4] < 1.25 * tput[2]  # 16, 32: the cap of 8 holds

    def test_tpot_stays_flat_while_ttft_takes_off_past_the_cap(self, sweep):
        """Decode is memory-bound: TPOT barely moves; waiting for a batch slot goes into TTFT."""
        pts = sweep.summary["curve"]["points"]
        tpot = [p["tpot_ms"]["p50"] for p in pts]
        assert max(tpot) < 1.5 * min(tpot)
        ttft = [p["ttft_ms"]["p99"] for p in pts]
        assert ttft[3] > 3 * ttft[2] and ttft[4] > ttft[3]

    def test_the_knee_is_at_the_batch_cap(self, sweep):
        """Doubling the users scales the throughput up to the engine's batch cap and barely past
        it: the knee is the cap itself, the step after it scaling by under a half."""
        knee = sweep.summary["curve"]["knee"]
        assert knee is not None and knee["offered"] == BATCH, knee
        assert knee["next_scaling"] < 0.5
        assert sweep.summary["curve"]["last_stage_meeting_sla"] in (1, 2)

    def test_every_request_belongs_to_exactly_one_stage(self, sweep):
        records = load_records(sweep.run_dir)
        assert len({r.id for r in records}) == len(records)
        stages = sweep.summary["stages"]
        assert [s["index"] for s in stages] == [0, 1, 2, 3, 4]
        for s in stages:
            mine = [r for r in records if r.stage == s["index"]]
            assert s["counts"]["sent"] + s["counts"]["warmup"] == len(mine)
            # load.warmup_requests (4) at most, one per slot: the c=2 stage warms 2
            assert s["counts"]["warmup"] == min(4, s["load"]["concurrency"])
        assert sum(s["counts"]["sent"] for s in stages) == sweep.summary["counts"]["sent"]


def test_a_ramp_is_warm_up_and_stays_out_of_the_stage_window(tmp_path):
    """Open loop 10 -> 20 req/s with a 1 s ramp into each: what the ramp sends is warm-up, and
    each stage's window opens after its ramp."""
    res = run(sweep_profile(tmp_path, {"rate": [10, 20], "stage_duration_s": 2.5, "ramp_s": 1.0}))
    records = load_records(res.run_dir)
    for s in res.summary["stages"]:
        mine = sorted((r for r in records if r.stage == s["index"]), key=lambda r: r.t_sched_ns)
        start = mine[0].t_sched_ns  # the first arrival of a ramp from 0 is at the stage's start
        ramp_end = start + 1_000_000_000
        assert all(r.warmup == (r.t_sched_ns < ramp_end) for r in mine)
        assert s["window"]["start_ns"] >= ramp_end
        assert s["counts"]["warmup"] > 0 and s["counts"]["sent"] > 0
    # ramping 10 -> 20 carries 15 requests a second on average over the ramp of stage 1
    ramp1 = [r for r in records if r.stage == 1 and r.warmup]
    assert 8 <= len(ramp1) <= 24


def test_a_killed_sweep_keeps_every_finished_record_with_its_stage(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "run",
            "quickstart",
            "--sweep",
            "concurrency=2,8",
            "--stage-duration",
            "3s",
            "--out",
            str(tmp_path),
            "--run-id",
            "killed",
            "--no-progress",
            "--no-report",
            "--set",
            "server_metrics.enabled=false",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    path = tmp_path / "killed" / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill once stage 1 is under way
        if path.exists() and any(b'"stage":1' in line for line in path.read_bytes().splitlines()):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    lines = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert {d["stage"] for d in lines} == {0, 1}
    stages = [d["stage"] for d in lines]
    assert stages == sorted(stages)  # stage 1 began once stage 0's requests had all finished
    assert all(d["ok"] for d in lines)


def test_a_single_stage_profile_keeps_the_single_stage_layout(tmp_path):
    p = load_profile(REPO / "profiles" / "quickstart.yaml")
    assert [s.name for s in resolve_stages(p.load, p.workload)] == ["c=16"]
    small = {"sim.preset": "llama3-8b-fp16@h100", "workload.num_requests": 4, "workload.input_tokens": None}
    res = run(
        helpers.profile(
            tmp_path, None, **small, **{"output.dir": str(tmp_path), "server_metrics.enabled": False}
        )
    )
    assert "stages" not in res.summary and "curve" not in res.summary
    assert {r.stage for r in res.records} == {0}
