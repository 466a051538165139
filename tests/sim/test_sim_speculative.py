"""The simulator's draft model (loadgen/sim/speculative.py): a step's tokens and cost from first
principles, vLLM's counters, and a run over real sockets whose speculative block (the server's
counters and the stream's tokens per event) is checked against the simulator's own log."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from loadgen.runner import api
from loadgen.sim import Engine, Seq, SimConfig, simulate
from loadgen.sim.metrics import Metrics

import helpers


def config(**kw) -> SimConfig:
    return SimConfig.from_dict({"preset": "llama3-8b-fp16@h100", "prefix_caching": False, **kw})


def step_ns(c: SimConfig, batch: int, context: int, k: int) -> int:
    """A decode step of ``batch`` sequences holding ``context`` tokens with k draft tokens: k
    draft passes at draft_cost of the plain step, then the target verifying B (k + 1) tokens."""
    ph = c.physics
    plain = max(ph.step_times(batch, context))
    return round(
        (k * c.draft_cost * plain + max(ph.step_times(batch * (k + 1), context)) + ph.overhead_s) * 1e9
    )


def test_all_accepted_a_step_gives_k_plus_one_tokens_at_the_verification_cost():
    """k=3, every draft accepted: after the prefill's first token, 4 tokens a step (the last
    step only what is left), each step the cost above."""
    c = config(num_speculative_tokens=3, spec_acceptance=1.0)
    (s,) = simulate(c, [(0, 100, 10)])
    times = np.array(s.token_vns)
    steps = np.unique(times)
    assert [int(np.sum(times == t)) for t in steps] == [1, 4, 4, 1]
    gaps = np.diff(steps).tolist()
    assert gaps == [step_ns(c, 1, 101, 3), step_ns(c, 1, 105, 3), step_ns(c, 1, 109, 3)]


def test_nothing_accepted_costs_more_than_no_draft_model():
    """Acceptance 0: one token a step, as without a draft model, but each step pays the drafts
    and the wider verification, so TPOT is worse: what a bad draft model does."""
    plain = simulate(config(), [(0, 100, 20)])[0]
    spec = simulate(config(num_speculative_tokens=4, spec_acceptance=0.0), [(0, 100, 20)])[0]
    assert len(spec.token_vns) == len(plain.token_vns) == 20
    assert np.all(np.diff(spec.token_vns) > np.diff(plain.token_vns))


def test_counters_are_vllms_and_the_acceptance_is_the_one_set():
    """k=3 at acceptance 0.6: per position 0.6, 0.36, 0.216 of drafts (binomial bounds at 4
    sigma), the rate (0.6 + 0.36 + 0.216) / 3, tokens = drafts + accepted exactly; /metrics shows
    them under vLLM's names; the same seed draws the same."""
    c = config(num_speculative_tokens=3, spec_acceptance=0.6, seed=7)
    eng = Engine(c)
    for _ in range(32):
        eng.submit(Seq(64, 200))
    while eng.has_work():
        eng.step()
    d = eng.drafter
    assert d is not None and d.draft_tokens == 3 * d.drafts
    for i, p in enumerate((0.6, 0.36, 0.216)):
        assert abs(d.accepted_per_position[i] / d.drafts - p) < 4 * (p * (1 - p) / d.drafts) ** 0.5
    assert d.accepted_tokens == sum(d.accepted_per_position)
    # every decode step's tokens are one draft's 1 + accepted (the last steps cut to the answer)
    assert eng.generation_tokens_total == 32 * 200 <= 32 + d.drafts + d.accepted_tokens
    text = Metrics(c.served_model_name).render_engine(eng)
    assert f'vllm:spec_decode_num_drafts_total{{model_name="{c.served_model_name}"}} {d.drafts}' in text
    assert f'position="2"}} {d.accepted_per_position[2]}' in text
    again = Engine(c)
    for _ in range(32):
        again.submit(Seq(64, 200))
    while again.has_work():
        again.step()
    assert again.drafter is not None and again.drafter.accepted_per_position == d.accepted_per_position


def test_the_engines_context_is_what_its_sequences_hold_with_free_drafts():
    """decode_context, which the next step's KV reads are costed from, is every decoding
    sequence's prompt + generated tokens after each step, drafts free (draft_cost 0) or not."""
    for cost in (0.0, 0.05):
        eng = Engine(config(num_speculative_tokens=4, spec_acceptance=0.8, draft_cost=cost))
        for n in (30, 50, 70):
            eng.submit(Seq(40, n))
        while eng.has_work():
            eng.step()
            assert eng.decode_context == sum(s.prompt_len + s.generated for s in eng.decoding)


def test_a_bad_setting_names_the_field():
    with pytest.raises(ValueError, match=r"sim\.spec_acceptance: .*less than or equal to 1"):
        SimConfig.from_dict({"spec_acceptance": 1.5})


@pytest.mark.slow
def test_a_run_reads_the_acceptance_from_the_counters_and_the_stream(tmp_path):
    """A chat run with continuous usage on a draft model (k=3, acceptance 0.6): the stream's
    tokens per event are the simulator's log's exactly, the server's acceptance rate is its
    counters' (near (0.6 + 0.36 + 0.216) / 3), and every client event met its server stamp."""
    profile = helpers.profile(
        tmp_path,
        None,
        **{
            "sim": {"preset": "llama3-8b-fp16@h100", "num_speculative_tokens": 3, "spec_acceptance": 0.6},
            "target.continuous_usage_stats": True,
            "target.ignore_eos": True,
            "workload.num_requests": 24,
            "workload.output_tokens": 48,
            "load.concurrency": 6,
            "load.warmup_requests": 0,
        },
    )
    res = asyncio.run(api.run_async(profile))
    assert res.summary["counts"]["ok"] == 24
    truth = [json.loads(line) for line in (res.run_dir / "ground_truth.jsonl").read_text().splitlines()]
    events = [n for t in truth for n in t["chunk_tokens"]]
    stream = res.summary["speculative"]["stream"]
    assert sum(events) == 24 * 48 and (stream["events"], stream["tokens"]) == (len(events), sum(events))
    assert stream["multi_token_events"] == pytest.approx(np.mean(np.array(events) > 1))
    server = res.summary["speculative"]["server"]
    assert server["source"] == "counters" and server["draft_tokens"] == 3 * server["drafts"]
    assert server["acceptance_rate"] == pytest.approx((0.6 + 0.36 + 0.216) / 3, abs=0.06)
    fid = res.summary["fidelity"]
    assert fid["requests_matched"] == 24 and fid["chunk_lag_ms"]["p50"] >= 0
