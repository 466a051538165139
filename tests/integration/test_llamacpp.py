"""loadgen against llama.cpp's llama-server (built by scripts/llamacpp_engine.py, a tiny GGUF).

The engine the suite had not met until issue 26: it answers a streamed request with
``Keep-Alive: timeout=5, max=100`` and closes the connection right after it, so a client that
reuses the connection at once loses every second request (half of 80 were lost on the
httptools and aiohttp transports before). Its per-slot context (8,192 over 8 slots) refuses
prompts past 1,024 tokens; its /metrics names are ``llamacpp:``; each response ends with its
own ``timings``. Bounded: about 80-128 requests of 100 tokens per run, a minute in all.
"""

from __future__ import annotations

import asyncio

import pytest

from loadgen.errors import RunError
from loadgen.runner import api

pytestmark = pytest.mark.integration

TRANSPORTS = ("httptools", "aiohttp", "httpx")


def run(profile):
    return asyncio.run(api.run_async(profile))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("concurrency,num_requests", [(8, 80), (32, 128)])
def test_no_request_is_lost_on_any_transport(
    llamacpp_profile, record_property, transport, concurrency, num_requests
):
    """Fixed 300 / 100 tokens, every transport, c=8 and c=32 (24 of them deferred for a slot):
    every request is ok, and any re-send is counted on its record and in the summary."""
    res = run(
        llamacpp_profile(
            target__transport=transport, load__concurrency=concurrency, workload__num_requests=num_requests
        )
    )
    c = res.summary["counts"]
    assert (c["ok"], c["failed"]) == (num_requests, 0), c
    resent = sum(r.attempts - 1 for r in res.records)
    assert c["retries"]["requests"] == resent
    record_property("retries", resent)
    print(f"\n{transport} c={concurrency}: ok {c['ok']}/{c['sent']}, re-sent {resent}")
    assert res.summary["sla"]["verdict"] in ("pass", "none")


def test_prompts_past_the_slot_context_are_refused_before_the_run(llamacpp_profile):
    """The chat profile's lognormal lengths reach past one slot's 1,024 tokens: the run is
    refused before a request is sent, with the numbers; with trim every request fits."""
    lengths = {
        "workload__input_tokens": {"kind": "lognormal", "mean": 512, "sigma": 0.6, "max": 4096},
        "workload__output_tokens": {"kind": "lognormal", "mean": 256, "sigma": 0.6, "max": 1024},
    }
    with pytest.raises(
        RunError, match=r"requests need more than the server's context of 1024 tokens per slot"
    ):
        run(llamacpp_profile(**lengths))
    res = run(llamacpp_profile(target__context_overflow="trim", **lengths))
    ident = res.summary["conditions"]["server"]["identity"]
    assert ident["max_model_len"] == 1024 and ident["slots"] == 8
    assert ident["requests_trimmed"] == ident["requests_over_max_model_len"] > 0
    assert res.summary["counts"]["failed"] == 0, res.summary["counts"]


def test_server_view_and_timings_beside_the_client(llamacpp_profile, record_property):
    """The llamacpp: metrics give the server view (its generated tokens are the client's), and
    each response's timings pair with the client's TTFT and TPOT; client minus server is
    reported: TPOT within 0.5 ms per token, TTFT above the server's prompt time (the client's
    includes the wait for a slot and HTTP)."""
    res = run(llamacpp_profile(load__concurrency=8, workload__num_requests=80))
    s = res.summary
    assert s["server"]["engine"] == "llamacpp"
    assert s["server"]["tokens"]["generation"] == sum(r.output_tokens for r in res.records)
    t = s["metrics"]["server_timings"]
    assert t["requests"] == 80
    d_ttft, d_tpot = t["ttft"]["difference_ms"], t["tpot"]["difference_ms"]
    for name, value in (
        ("ttft_client_ms", t["ttft"]["client_mean_ms"]),
        ("ttft_server_prompt_ms", t["ttft"]["server_mean_ms"]),
        ("ttft_client_minus_server_ms", d_ttft),
        ("tpot_client_ms", t["tpot"]["client_mean_ms"]),
        ("tpot_server_ms", t["tpot"]["server_mean_ms"]),
        ("tpot_client_minus_server_ms", d_tpot),
    ):
        record_property(name, round(value, 4))
    tt, tp = t["ttft"], t["tpot"]
    print(
        f"\nTTFT client {tt['client_mean_ms']:.2f} ms, server prompt {tt['server_mean_ms']:.2f} ms "
        f"({d_ttft:+.2f}); TPOT client {tp['client_mean_ms']:.3f} ms, server {tp['server_mean_ms']:.3f} "
        f"ms ({d_tpot:+.3f})"
    )
    assert d_ttft > 0
    assert abs(d_tpot) < 0.5
