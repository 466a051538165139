"""Embeddings and rerank against a real vLLM serving the tiny model as an embedding model: every
request ok, items and prompt tokens as the server counts them, and the client's request latency
beside vLLM's own end-to-end histogram (one request per text when batches are of one)."""

from __future__ import annotations

from loadgen.runner import api

from .conftest import profile_maker
from .test_vllm import histogram_sums


def run(profile):
    return api.run(profile)


def delta(before: dict, after: dict, name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def test_embeddings_latency_agrees_with_the_server(vllm_pooling, tmp_path, record_property):
    """Batches of one text: vLLM counts one request per text, so its mean E2E is the same
    population as the client's; the client's may exceed it by the loopback and the parse, and
    never falls below it (beyond clock granularity)."""
    make = profile_maker(vllm_pooling, tmp_path, server_metrics__enabled=False, load__warmup_requests=0)
    before = histogram_sums(vllm_pooling.metrics_text())
    res = run(
        make(
            target__endpoint="embeddings",
            workload__num_requests=24,
            workload__batch_size=1,
            workload__input_tokens=64,
            load__concurrency=2,
        )
    )
    after = histogram_sums(vllm_pooling.metrics_text())
    n = after["vllm:e2e_request_latency_seconds_count"] - before["vllm:e2e_request_latency_seconds_count"]
    server_ms = (
        1e3
        * (after["vllm:e2e_request_latency_seconds_sum"] - before["vllm:e2e_request_latency_seconds_sum"])
        / n
    )
    assert res.summary["counts"]["ok"] == 24 == n
    d = res.summary["metrics"]["e2e_ms"]["mean"] - server_ms
    line = f"embeddings: E2E client-minus-server {d:+.2f} ms (server mean {server_ms:.2f} ms)"
    print("\n" + line)
    record_property("e2e_client_minus_server_ms", round(d, 4))
    assert -0.5 < d < 25.0 + server_ms, line


def test_batches_and_rerank_count_what_the_server_counts(vllm_pooling, tmp_path):
    """Batches of 1-8 texts: the server's prompt-token counter grows by exactly the records'
    prompt tokens, and its request count by the items; rerank answers every document."""
    make = profile_maker(vllm_pooling, tmp_path, server_metrics__enabled=False, load__warmup_requests=0)
    before = histogram_sums(vllm_pooling.metrics_text())
    res = run(
        make(
            target__endpoint="embeddings",
            workload__num_requests=12,
            workload__batch_size={"kind": "uniform", "min": 1, "max": 8},
            workload__input_tokens=48,
            load__concurrency=2,
        )
    )
    after = histogram_sums(vllm_pooling.metrics_text())
    items = sum(r.items or 0 for r in res.records)
    assert res.summary["counts"]["ok"] == 12 and items > 12
    grew = after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
    assert grew == sum(r.prompt_tokens for r in res.records)
    assert (
        after["vllm:e2e_request_latency_seconds_count"] - before["vllm:e2e_request_latency_seconds_count"]
        == items
    )
    res = run(
        make(
            target__endpoint="rerank",
            workload__num_requests=6,
            workload__batch_size=4,
            workload__input_tokens=32,
            load__concurrency=1,
        )
    )
    assert res.summary["counts"]["ok"] == 6 and all(r.items == 4 for r in res.records)
