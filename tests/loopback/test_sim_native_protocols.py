"""Triton's generate_stream and SGLang's native /generate end to end on the embedded simulator
(a profile with no target.url): every request against the simulator's ground truth, matched by
response id, and the prompts counted as the same run's prompts are on /v1/completions. The
timing bounds of tests/sim/test_fidelity.py run there, for these protocols too."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import run

PROTOCOLS = {
    "triton": {"target__endpoint": "triton_generate", "target__model": "ensemble"},
    "sglang": {"target__endpoint": "sglang_generate"},
}
COMPLETIONS = {"target__endpoint": "completions", "target__include_usage": True}


def truth(res) -> dict[str, dict]:
    lines = (res.run_dir / "ground_truth.jsonl").read_text().splitlines()
    return {t["id"]: t for t in map(json.loads, lines)}


def on_sim(make_profile, **overrides):
    """6 requests of 64 tokens in, 16 out, 3 at a time, on the simulator at 5x wall speed."""
    return run(
        make_profile(
            None,
            workload__num_requests=6,
            workload__output_tokens=16,
            workload__input_tokens=64,
            load__concurrency=3,
            sim__time_scale=0.2,
            **overrides,
        )
    )


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_every_request_agrees_with_the_ground_truth(make_profile, proto):
    """Every request ok and matched in the fidelity block; exactly the 16 tokens asked for
    (ignore_eos), one per event, as the simulator logged them; no event stamped before the
    simulator sent it; SGLang's prompt tokens are the simulator's (Triton reports none)."""
    res = on_sim(make_profile, **PROTOCOLS[proto])
    assert res.summary["counts"]["ok"] == 6
    assert res.summary["fidelity"]["requests_matched"] == 6
    gt = truth(res)
    for r in res.records:
        t = gt[r.response_id]
        assert t["endpoint"] == PROTOCOLS[proto]["target__endpoint"]
        assert r.output_tokens == t["output_tokens"] == r.requested_output_tokens == 16
        assert r.chunk_tokens == t["chunk_tokens"] == [1] * 16
        assert np.all(np.array(r.chunk_times_ns) >= np.array(t["chunk_ns"]))
        if proto == "sglang":
            assert (r.prompt_tokens, r.prompt_tokens_source) == (t["prompt_tokens"], "usage")
            assert r.response_id.startswith("sglang-sim-")
        else:
            assert t["model"] == "ensemble" and r.response_id.startswith("triton-sim-")


@pytest.mark.parametrize(
    "proto,fmt",
    [("triton", "text"), ("sglang", "text"), ("sglang", "token_ids")],
    ids=["triton", "sglang", "sglang_ids"],
)
@pytest.mark.slow
def test_prompts_count_as_on_completions(make_profile, proto, fmt):
    """The same workload's prompts (text, or token ids as SGLang's input_ids) count the same
    prompt tokens on the native path as on /v1/completions, request by request."""
    fmt_override = {"target__prompt_format": fmt}
    native = on_sim(make_profile, **PROTOCOLS[proto], **fmt_override)
    plain = on_sim(make_profile, **COMPLETIONS, **fmt_override)
    native_gt, plain_gt = truth(native), truth(plain)
    counts = {r.id: native_gt[r.response_id]["prompt_tokens"] for r in native.records}
    expected = {r.id: plain_gt[r.response_id]["prompt_tokens"] for r in plain.records}
    assert counts == expected and len(counts) == 6
    assert expected == {r.id: r.prompt_tokens for r in plain.records}  # the completions usage


@pytest.mark.parametrize(
    "proto,extra,message",
    [
        ("triton", {"max_tokens": None}, "input 'max_tokens' is missing"),
        ("sglang", {"text": None}, "Either text or input_ids should be provided, not both or neither"),
    ],
)
def test_a_bad_body_is_a_400_that_costs_one_request(make_profile, proto, extra, message):
    """A body the protocol refuses (target.extra_body drops a field it needs): HTTP 400 with the
    protocol's message, one failed request of class http_400, nothing reaches the engine."""
    res = run(
        make_profile(
            None,
            workload__num_requests=1,
            load__concurrency=1,
            target__extra_body=extra,
            **PROTOCOLS[proto],
        )
    )
    (r,) = res.records
    assert (r.ok, r.error_class, r.http_status) == (False, "http_400", 400)
    assert message in r.error_message
    c = res.summary["counts"]
    assert (c["sent"], c["ok"], c["failed"]) == (1, 0, 1)
    assert truth(res) == {}
