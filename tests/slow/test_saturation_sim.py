"""The over-saturation verdict on the built-in simulator: two 20 s Poisson stages of the chat
profile's lengths on llama3-8b-fp16@h100, one 10 % below the engine's saturation throughput and
one 10 % above it, each judged from its own records (and the server's waiting queue). The
saturation throughput is the simulator's own, computed here in virtual time from its engine
(nothing of loadgen's measuring): the completion rate of a backlog it never runs out of."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.sim import SimConfig, simulate
from loadgen.workload.lengths import sample_lengths

import helpers
from helpers import run

PRESET = "llama3-8b-fp16@h100"
LENGTHS = {
    "workload.input_tokens": {"kind": "lognormal", "mean": 512, "sigma": 0.6, "max": 4096},
    "workload.output_tokens": {"kind": "lognormal", "mean": 256, "sigma": 0.6, "max": 1024},
}


def saturation_throughput(workload, n: int = 2000) -> float:
    """Requests per second the engine completes when it always has work waiting: ``n`` requests
    of the workload's lengths (its own sampler) all queued at once, the middle half of their
    completions."""
    rng = np.random.default_rng(0)
    prompts = sample_lengths(workload.input_tokens, n, rng)
    outputs = sample_lengths(workload.output_tokens, n, rng)
    config = SimConfig.from_dict({"preset": PRESET})
    seqs = simulate(config, [(0, int(p), int(o)) for p, o in zip(prompts, outputs)])
    ends = np.sort([s.token_vns[-1] for s in seqs])
    return (n // 2) / ((ends[3 * n // 4] - ends[n // 4]) / 1e9)


@pytest.mark.slow
def test_a_stage_past_saturation_is_over_saturated_and_one_below_is_stable(tmp_path):
    def profile(stages):
        return helpers.profile(
            tmp_path,
            None,
            **{
                "workload.num_requests": None,
                "load.concurrency": None,
                "load.stages": stages,
                "sim.preset": PRESET,
                "target.ignore_eos": True,
                **LENGTHS,
            },
        )

    mu = saturation_throughput(profile([{"rate": 1.0, "duration_s": 1.0}]).workload)
    assert 25 < mu < 45  # the H100's chat capacity, as docs/metrics.md quotes it (about 35 req/s)
    below, above = round(0.9 * mu, 1), round(1.1 * mu, 1)
    stages = [{"rate": r, "duration_s": 20.0, "warmup_requests": round(5 * r)} for r in (below, above)]
    p = profile(stages)
    summary = run(p).summary
    verdicts = [s["saturation"]["verdict"] for s in summary["stages"]]
    print(f"saturation {mu:.1f} req/s; {below} -> {verdicts[0]}, {above} -> {verdicts[1]}")
    for s in summary["stages"]:
        growth = {k: round(v["growth"], 1) for k, v in s["saturation"]["signals"].items()}
        print(s["name"], s["saturation"]["reason"], growth)
    assert verdicts == ["stable", "over_saturated"]
    grown = summary["stages"][1]["saturation"]["signals"]
    assert grown["outstanding"]["grows"] and grown["ttft_ms"]["grows"]
    assert "waiting" in grown  # the simulator's /metrics has a waiting queue, and it was read
