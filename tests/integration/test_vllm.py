"""loadgen against a real vLLM (CPU build, the tiny model of scripts/real_engines.py).

Bounded: a few dozen requests per test, short outputs; the whole module takes about a minute
after the server is up (~40 s). Figures measured on the 2-core development machine are in the
comments next to each bound.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.runner import api

pytestmark = pytest.mark.integration

MS = 1e6
# What follows the last token on a vLLM stream: the usage-only chunk (choices: []) and
# `data: [DONE]`, written right after the last token's event. Measured: median ~0.1 ms, max a
# few ms at c=64; the bound leaves room for a busy 2-core machine.
TAIL_BOUND_MS = 50.0


def run(profile):
    """Run a profile to completion in a fresh event loop, as `loadgen run` does."""
    return asyncio.run(api.run_async(profile))


def histogram_sums(text: str) -> dict[str, float]:
    """``{sample name: value}`` of every ``vllm:*_sum`` / ``_count`` / ``_total`` sample,
    summed over label sets (one engine here)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("vllm:") and s.name.endswith(("_sum", "_count", "_total")):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def server_means(before: dict, after: dict) -> dict[str, float]:
    """Server-side means over the run (ms) from histogram deltas, and the request count."""

    def d(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    itl = "vllm:inter_token_latency_seconds"
    if itl + "_count" not in after:  # vLLM before the V1 metric rename
        itl = "vllm:time_per_output_token_seconds"
    ttft = "vllm:time_to_first_token_seconds"
    return {
        "ttft_ms": 1e3 * d(ttft + "_sum") / d(ttft + "_count"),
        "itl_ms": 1e3 * d(itl + "_sum") / d(itl + "_count"),
        "e2e_ms": 1e3
        * d("vllm:e2e_request_latency_seconds_sum")
        / d("vllm:e2e_request_latency_seconds_count"),
        "requests": d(ttft + "_count"),
        "itl_samples": d(itl + "_count"),
        "prefix_cache_hits": d("vllm:prefix_cache_hits_total"),
    }


def test_chat_and_completions_succeed(vllm_profile):
    """Chat and completions runs against vLLM finish with every request ok."""
    for endpoint, fmt in (("chat", "text"), ("completions", "text"), ("completions", "token_ids")):
        res = run(vllm_profile(target__endpoint=endpoint, target__prompt_format=fmt))
        c = res.summary["counts"]
        assert c["ok"] == c["sent"] == 8, (endpoint, fmt, c)
        assert all(r.response_id for r in res.records)


def test_output_lengths_equal_requested_with_ignore_eos(vllm_profile):
    """With ignore_eos every request's output length (final usage) is exactly the requested one."""
    res = run(
        vllm_profile(
            workload__num_requests=16, workload__output_tokens={"kind": "uniform", "min": 4, "max": 96}
        )
    )
    assert res.summary["counts"]["ok"] == 16
    requested = {r.requested_output_tokens for r in res.records}
    assert len(requested) > 4  # the lengths really varied
    for r in res.records:
        assert r.token_source == "usage"
        assert r.output_tokens == r.requested_output_tokens
        # One token per event for this model (every token decodes to text), so chunks = tokens.
        assert len(r.chunk_times_ns) <= r.output_tokens


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous_usage", "final_usage"])
def test_usage_counts_hold_when_events_carry_several_tokens(vllm_profile, continuous):
    """At 64 streams vLLM merges tokens into one event; per-chunk usage counts them all, and the
    final usage gives the exact total either way."""
    # Merging happens when vLLM's frontend falls behind its engine, which is load-dependent:
    # measured here, 8-60 of 64 streams (continuous usage) and ~235 events per 256 tokens
    # (final usage) on most days, none on some. Two waves of 64 give it room.
    res = run(
        vllm_profile(
            load__concurrency=64,
            workload__num_requests=128,
            workload__output_tokens=256,
            target__continuous_usage_stats=continuous,
        )
    )
    recs = res.records
    assert res.summary["counts"]["ok"] == 128
    for r in recs:
        assert r.output_tokens == r.requested_output_tokens == 256
    events = sum(len(r.chunk_times_ns) for r in recs)
    if continuous:
        for r in recs:
            assert r.token_source == "continuous_usage"
            assert sum(r.chunk_tokens) == r.output_tokens
        multi = sum(1 for r in recs if max(r.chunk_tokens) > 1)
        print(
            f"\ncontinuous usage at c=64: {multi}/{len(recs)} streams had multi-token events, "
            f"{events / len(recs):.1f} events per 256 tokens"
        )
        if multi == 0:
            # Measured 2026-12-01 on a slower day of this VM: 0/128 in three runs, with the
            # transport of before and after that day's change alike (the engine's steps were
            # slow enough for the frontend to keep up). The counts above held; the merge path
            # itself is covered against the scripted server (test_engine.py).
            pytest.skip("vLLM merged no events this run (its frontend kept up with its engine)")
    else:
        for r in recs:
            assert r.token_source == "usage"
        print(f"\nfinal usage at c=64: {events / len(recs):.1f} events per 256 tokens")


def test_ttft_itl_and_e2e_are_consistent(vllm_profile):
    """Per request TTFT <= E2E, the ITLs sum to last chunk - first token, and E2E - TTFT exceeds
    that only by the stream's short tail (usage chunk and [DONE])."""
    res = run(
        vllm_profile(
            load__concurrency=16,
            workload__num_requests=32,
            workload__output_tokens=64,
            target__continuous_usage_stats=True,
        )
    )
    tails = []
    for r in res.records:
        assert r.ok
        ttft = r.t_first_token_ns - r.t_send_ns
        e2e = r.t_end_ns - r.t_send_ns
        assert 0 < ttft <= e2e
        assert r.chunk_times_ns[0] == r.t_first_token_ns
        itls = np.diff(r.chunk_times_ns)
        assert (itls >= 0).all()
        span = r.chunk_times_ns[-1] - r.t_first_token_ns
        assert int(itls.sum()) == span
        tail = (e2e - ttft) - span
        assert tail >= 0
        tails.append(tail / MS)
    assert max(tails) < TAIL_BOUND_MS, tails
    print(f"\ntail after the last token: median {np.median(tails):.2f} ms, max {max(tails):.2f} ms")


@pytest.mark.parametrize("concurrency,num_requests", [(8, 64), (32, 128)])
def test_client_means_agree_with_server_histograms(
    vllm, vllm_profile, record_property, concurrency, num_requests
):
    """loadgen's mean TTFT and ITL over a run agree with vLLM's own histograms (sum/count deltas
    of /metrics across the run); the client-minus-server difference is reported."""
    # A client starved of CPU (other work on this 2-core machine, which vLLM's worker and
    # engine loop already fill) inflates its own latencies; loadgen flags that in the summary
    # (`client.client_limited`). Such a run says nothing about agreement: it is reported and
    # retried, and if every attempt is starved the test skips with the figures.
    attempts = []
    for attempt in range(3):
        before = histogram_sums(vllm.metrics_text())
        res = run(
            vllm_profile(
                load__concurrency=concurrency,
                workload__num_requests=num_requests,
                workload__input_tokens=128,
                workload__output_tokens=128,
                target__endpoint="completions",
                target__prompt_format="token_ids",
                target__continuous_usage_stats=True,
                # loadgen's own /metrics scraper off: only these two scrapes.
                server_metrics__enabled=False,
            )
        )
        after = histogram_sums(vllm.metrics_text())
        srv = server_means(before, after)
        client = res.summary["client"]
        attempts.append(
            f"attempt {attempt + 1}: client TTFT {res.summary['metrics']['ttft_ms']['mean']:.1f} "
            f"ms vs server {srv['ttft_ms']:.1f} ms, client loop lag p99 "
            f"{client['event_loop_lag_ms']['p99']:.1f} ms"
        )
        print("\n" + attempts[-1])
        if not client["client_limited"]:
            break
        time.sleep(10)
    else:
        pytest.skip(
            "the client was starved of CPU in every attempt (loadgen flagged "
            "client_limited), so its means are not comparable: " + "; ".join(attempts)
        )
    m = res.summary["metrics"]
    assert res.summary["counts"]["ok"] == num_requests
    assert srv["requests"] == num_requests  # nothing else ran on the server meanwhile
    assert srv["itl_samples"] == num_requests * 127
    # Prompts differ from their first token: vLLM's prefix cache must find nothing to reuse.
    assert srv["prefix_cache_hits"] == 0
    client_ttft, client_itl = m["ttft_ms"]["mean"], m["itl_per_token_ms"]["mean"]
    client_e2e = m["e2e_ms"]["mean"]
    d_ttft, d_itl, d_e2e = (
        client_ttft - srv["ttft_ms"],
        client_itl - srv["itl_ms"],
        client_e2e - srv["e2e_ms"],
    )
    line = (
        f"c={concurrency} n={num_requests}: TTFT client {client_ttft:.2f} ms, server "
        f"{srv['ttft_ms']:.2f} ms, diff {d_ttft:+.2f} ms; ITL client {client_itl:.3f} ms "
        f"(per event {m['itl_ms']['mean']:.3f}), server {srv['itl_ms']:.3f} ms, "
        f"diff {d_itl:+.3f} ms; E2E client {client_e2e:.1f} ms, server {srv['e2e_ms']:.1f} ms, "
        f"diff {d_e2e:+.2f} ms; client loop lag p99 "
        f"{res.summary['client']['event_loop_lag_ms']['p99']:.1f} ms"
    )
    print("\n" + line)
    for name, value in (
        ("ttft_client_ms", client_ttft),
        ("ttft_server_ms", srv["ttft_ms"]),
        ("ttft_client_minus_server_ms", d_ttft),
        ("itl_client_ms", client_itl),
        ("itl_server_ms", srv["itl_ms"]),
        ("itl_client_minus_server_ms", d_itl),
        ("e2e_client_ms", client_e2e),
        ("e2e_server_ms", srv["e2e_ms"]),
        ("e2e_client_minus_server_ms", d_e2e),
    ):
        record_property(name, round(value, 4))
    # The client's clock starts before the server's (request upload, HTTP parsing) and stops
    # after it (detokenisation, SSE write, the loopback read), so its means are never below the
    # server's. On a quiet machine the excess is a few ms. On this 2-core box vLLM's worker
    # holds one core and its engine core spins on the other, and the API server that turns
    # engine outputs into SSE gets what is left: it sometimes delivers a stretch of tokens late
    # and at once (seen with a bare socket client too). So TTFT may exceed the server's by up
    # to the server's own mean (+25 ms), E2E by 10 % (+25 ms), and the per-token ITL means
    # agree within 25 %.
    assert -0.5 < d_ttft < 25.0 + srv["ttft_ms"], line
    assert -0.5 < d_e2e < 25.0 + 0.10 * srv["e2e_ms"], line
    assert abs(d_itl) < 0.25 * srv["itl_ms"], line


@pytest.mark.parametrize("endpoint", ["responses", "messages"])
def test_hosted_api_protocols_agree_with_the_server(vllm, vllm_profile, record_property, endpoint):
    """vLLM's /v1/responses and /v1/messages: every request ok, prompts fitted to the exact
    length (/tokenize with the chat template), output lengths equal the requested ones (the
    stream's usage), one event per token for this model, and the mean TTFT agrees with vLLM's
    own histogram within test_client_means_agree_with_server_histograms' bounds."""
    before = histogram_sums(vllm.metrics_text())
    res = run(
        vllm_profile(
            target__endpoint=endpoint,
            workload__num_requests=16,
            workload__output_tokens=32,
            load__concurrency=4,
            load__warmup_requests=0,
            server_metrics__enabled=False,
        )
    )
    srv = server_means(before, histogram_sums(vllm.metrics_text()))
    assert res.summary["counts"]["ok"] == 16 == srv["requests"]
    for r in res.records:
        assert (r.token_source, r.output_tokens) == ("usage", r.requested_output_tokens)
        assert (r.prompt_tokens_source, r.prompt_tokens) == ("usage", r.requested_prompt_tokens)
        assert len(r.chunk_times_ns) <= r.output_tokens
    d_ttft = res.summary["metrics"]["ttft_ms"]["mean"] - srv["ttft_ms"]
    line = f"{endpoint}: TTFT client-minus-server {d_ttft:+.2f} ms (server mean {srv['ttft_ms']:.2f} ms)"
    print("\n" + line)
    record_property("ttft_client_minus_server_ms", round(d_ttft, 4))
    assert -0.5 < d_ttft < 25.0 + srv["ttft_ms"], line


def test_tool_call_streams_and_structured_output_against_vllm(vllm, vllm_profile, record_property):
    """A named tool_choice (vLLM streams it through its guided decoding) and a JSON-schema
    response_format: every request ok and answered by the server; each tool-call answer is one
    call to the named function, its pieces counted as output and its first one timed; the
    structured answers are validated (the tiny random model's JSON is mostly whitespace, so the
    valid share is whatever it is: the check is that each answer was scored)."""
    tools = {
        "functions": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ],
        "choice": "get_weather",
    }
    before = histogram_sums(vllm.metrics_text())
    res = run(
        vllm_profile(
            workload__tools=tools,
            target__ignore_eos=False,
            workload__output_tokens=32,
            load__warmup_requests=0,
        )
    )
    srv = server_means(before, histogram_sums(vllm.metrics_text()))
    assert res.summary["counts"]["ok"] == 8 == srv["requests"]
    rows = [json.loads(line) for line in (res.run_dir / "requests.jsonl").read_text().splitlines()]
    assert all(r["tool_calls"] == 1 and r["tool_names"] == ["get_weather"] for r in rows), rows[0]
    tool = res.summary["metrics"]["ttft_tool_ms"]["mean"]
    line = f"tool calls: first tool-call token {tool:.2f} ms vs the server's TTFT {srv['ttft_ms']:.2f} ms"
    print("\n" + line)
    record_property("tool_call_client_minus_server_ms", round(tool - srv["ttft_ms"], 4))
    assert tool > srv["ttft_ms"] - 0.5, line  # never before the server's own first token

    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    res = run(
        vllm_profile(workload__response_format=fmt, target__ignore_eos=False, workload__output_tokens=256)
    )
    quality = res.summary["quality"]
    assert res.summary["counts"]["ok"] == 8 and quality["json_scored"] == 8
    print(f"structured: {quality['json_valid_answers']} of 8 valid")
