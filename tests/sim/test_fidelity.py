"""loadgen's measurements against the built-in simulator's ground truth, request by request.

loadgen starts the simulator itself (a profile with no ``target.url`` and a ``sim`` section),
so this is the user's zero-setup path end to end: the simulator runs in its own process and
writes ``<run_dir>/ground_truth.jsonl`` with the ``perf_counter_ns`` at which each content chunk
left it (same CLOCK_MONOTONIC as the client), matched here to loadgen's records by response id.

Sign convention: trail = client timestamp - simulator timestamp. The simulator stamps a chunk
the instant before ``response.write()`` hands its bytes to the kernel, so no client can read it
before its stamp: trails are >= 0 up to the clock read's own jitter (``NEG_MARGIN_MS`` on the
median; a client stamping events before they were sent would move the median far below it).

Tolerances were set from measurements on the 2-core development machine (shared with other
work; figures beside each test). On two cores shared by client, simulator and whatever else
runs, any single sample can be hit by a descheduling of either process (measured: one
simulator stamp 5 ms late with another test suite running alongside), so the tight bounds are
on the median and the 10th/90th percentiles, and only loose ones on p99 and the maximum.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import orjson
import pytest

from loadgen.runner import api

import helpers
from helpers import assert_percentiles, assert_within

MS = 1e6
PRESET = "llama3-8b-fp16@h100"  # B=1 decode step ~7 ms, prefill of 32 tokens ~1 ms
# The simulator stamps before write(), so a trail below zero is clock-read jitter only;
# NEG_MARGIN_MS bounds the median (it was set when the stamp followed the write and a client on
# the other core could stamp first by 0.1-0.2 ms). No single sample is bounded below; a client
# stamping before the bytes were sent (at send time, say) would move the median by ~TTFT (7+ ms),
# and a role-only chunk taken for a token would change the chunk count.
NEG_MARGIN_MS = 0.2


# The protocols the c=1 test runs over: the profiles' default (chat) and the native ones the
# simulator serves beside it (their events are paced by the same engine loop).
ENDPOINTS = {
    "chat": {},
    "triton_generate": {"target.endpoint": "triton_generate", "target.model": "ensemble"},
    "sglang_generate": {"target.endpoint": "sglang_generate"},
}


def _run_sim(tmp_path: Path, concurrency: int, num_requests: int, output_tokens: int, **target):
    profile = helpers.profile(
        tmp_path,
        None,
        **{
            "sim": {"preset": PRESET, "time_scale": 1.0, "seed": 1},
            "load.concurrency": concurrency,
            "load.warmup_requests": 0,
            "workload.num_requests": num_requests,
            "workload.output_tokens": output_tokens,
            **target,
        },
    )
    res = asyncio.run(api.run_async(profile))
    assert res.summary["counts"]["ok"] == num_requests, res.summary["counts"]
    truth = {}
    for line in (res.run_dir / "ground_truth.jsonl").read_bytes().splitlines():
        d = orjson.loads(line)
        truth[d["id"]] = d
    return res, truth


def _compare(res, truth) -> dict[str, np.ndarray]:
    """Per request: first-token trail, every chunk's trail, TTFT error, TPOT relative error."""
    first, chunks, ttft_err, tpot_rel = [], [], [], []
    assert len(truth) == len(res.records)
    for r in res.records:
        gt = truth[r.response_id]
        # Same number of content chunks and tokens as the simulator emitted.
        assert len(r.chunk_times_ns) == len(gt["chunk_ns"]), r.response_id
        assert r.output_tokens == gt["output_tokens"] == r.requested_output_tokens, r.response_id
        assert sum(r.chunk_tokens) == sum(gt["chunk_tokens"]), r.response_id
        first.append((r.t_first_token_ns - gt["first_token_ns"]) / MS)
        chunks.append((np.array(r.chunk_times_ns) - np.array(gt["chunk_ns"])) / MS)
        ttft_err.append(((r.t_first_token_ns - r.t_send_ns) - (gt["first_token_ns"] - gt["arrival_ns"])) / MS)
        ours = (r.chunk_times_ns[-1] - r.chunk_times_ns[0]) / (r.output_tokens - 1)
        theirs = (gt["chunk_ns"][-1] - gt["chunk_ns"][0]) / (gt["output_tokens"] - 1)
        tpot_rel.append(ours / theirs - 1.0)
    return {
        "first": np.array(first),
        "chunks": np.concatenate(chunks),
        "ttft_err": np.array(ttft_err),
        "tpot_rel": np.array(tpot_rel),
    }


def _p(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q))


@pytest.mark.slow  # 16 requests of 48 tokens in real time: ~6 s
@pytest.mark.timing_absolute
@pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_concurrency_1_matches_simulator_ground_truth(tmp_path, endpoint):
    """At c=1: first token trails the simulator's send by p50 -0.2..0.5 ms (p90 < 1, p99 < 5 ms),
    TTFT exceeds the simulator's by -0.2..3 ms (p10..p90), TPOT within 1 % (p90; max 3 %); over
    chat and over Triton's and SGLang's native streams alike."""
    # Measured here (standalone, 9 runs of 16 x 48 tokens): first-token trail p50 -0.05..0.07,
    # p99 0.13-0.24 ms; every chunk's trail p50 0.09-0.13 ms, p99 0.37-0.46 ms; TTFT error
    # 0.5-1.6 ms (the request's own trip: serialise, write, the server reads its headers), with
    # single requests at 3.3-3.9 ms or -1.7 ms when the shared machine was busy; TPOT error
    # <= 0.25 %.
    res, truth = _run_sim(tmp_path, concurrency=1, num_requests=16, output_tokens=48, **ENDPOINTS[endpoint])
    m = _compare(res, truth)
    assert _p(m["first"], 50) >= -NEG_MARGIN_MS and _p(m["chunks"], 50) >= -NEG_MARGIN_MS
    assert_percentiles(m["first"], f"{endpoint} c=1 first-token trail", p50=0.5, p90=1.0, p99=5.0)
    assert_percentiles(m["chunks"], f"{endpoint} c=1 chunk trail", p50=0.5, p99=2.0)
    # Client TTFT counts from just before its write, the simulator's from its handler starting
    # (headers parsed): ours is longer by the request's trip, never shorter beyond the margin.
    assert _p(m["ttft_err"], 10) >= -NEG_MARGIN_MS
    assert_percentiles(m["ttft_err"], f"{endpoint} c=1 TTFT error", p50=2.0, p90=3.0)
    assert_percentiles(
        np.abs(m["tpot_rel"]), f"{endpoint} c=1 |TPOT error| / TPOT", unit="", p90=0.01, max=0.03
    )
    tpot = res.summary["metrics"]["tpot_ms"]
    gt_tpot = np.mean([g["tpot_ms"] for g in truth.values()])
    assert_within(
        abs(tpot["mean"] / gt_tpot - 1), 0.01, f"{endpoint} c=1 |mean TPOT / the simulator's - 1|", unit=""
    )


@pytest.mark.timing_absolute
@pytest.mark.slow
@pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
def test_concurrency_64_matches_simulator_ground_truth(tmp_path):
    """At c=64: first token and every chunk trail the simulator's send by p50 -0.2..2 ms (chunks:
    3 ms), p99 < 10 ms; TPOT within 2 % (p90; max 5 %); chunk and token counts equal."""
    # Measured here (standalone, 5 runs of 128 x 64 tokens, 2026-12): first-token trail p50
    # 0.2-0.4, p99 0.6-1.6 ms; every chunk's trail p50 1.7-1.9 ms, p99 2.5-2.9 ms (a decode step's
    # 64 chunks arrive together and are read one after another; it was 0.6-0.8 ms on a quieter
    # day, and two CI runs saw 2.01, so the median's bound is 3 ms: a stamp taken at the wrong
    # event moves it by a TTFT, 7+ ms); TPOT
    # error <= 0.7 %. 64 tokens, not fewer: TPOT spans first to last chunk, so one chunk late by
    # a scheduling hiccup moves it by delay / span (with 32 tokens, one 11 ms hiccup once made
    # it 5.2 %).
    # TTFT is not compared at c=64: a closed loop of 64 slots sends in bursts (the whole batch
    # finishes on the same engine step), and the time from loadgen's send stamp to the
    # simulator's handler start then includes both processes working through the burst
    # (measured 2-39 ms); bench/fidelity.py --sweep reports it.
    res, truth = _run_sim(tmp_path, concurrency=64, num_requests=128, output_tokens=64)
    m = _compare(res, truth)
    assert _p(m["first"], 50) >= -NEG_MARGIN_MS and _p(m["chunks"], 50) >= -NEG_MARGIN_MS
    assert_percentiles(m["first"], "c=64 first-token trail", p50=2.0, p99=10.0)
    assert_percentiles(m["chunks"], "c=64 chunk trail", p50=3.0, p99=10.0)
    assert_percentiles(np.abs(m["tpot_rel"]), "c=64 |TPOT error| / TPOT", unit="", p90=0.02, max=0.05)
