"""loadgen's measurements against the built-in simulator's ground truth, request by request.

loadgen starts the simulator itself (a profile with no ``target.url`` and a ``sim`` section),
so this is the user's zero-setup path end to end: the simulator runs in its own process and
writes ``<run_dir>/ground_truth.jsonl`` with the ``perf_counter_ns`` at which each content chunk
left it (same CLOCK_MONOTONIC as the client), matched here to loadgen's records by response id.

Sign convention: trail = client timestamp - simulator timestamp. The simulator stamps a chunk
right AFTER ``await response.write()`` returns, i.e. after the bytes were already handed to the
kernel, so the client on the other core can read and stamp them a little before the simulator's
own stamp: trails may be slightly negative, and the lower bounds below allow for that
(``NEG_MARGIN_MS``), while anything further below would mean the client stamps events before
they were sent.

Tolerances were set from measurements on the 2-core development machine (shared with other
work; see each docstring) with headroom for a busy CI host.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import orjson
import pytest

from loadgen import api
from loadgen.profile import load_profile

MS = 1e6
PRESET = "llama3-8b-fp16@h100"  # B=1 decode step ~7 ms, prefill of 32 tokens ~1 ms
# The simulator stamps after write() returned; a client on the other core may stamp first.
# Typically by up to 0.1-0.2 ms here; a single stamp can be later still when the simulator is
# preempted or collects garbage between its write and its clock read (one chunk in 4096 was
# -1.5 ms at c=64), so the bound is on the 1st percentile: a client that stamps events before
# they are sent would shift the whole distribution, not one sample.
NEG_MARGIN_MS = 0.5


def _run_sim(tmp_path: Path, concurrency: int, num_requests: int, output_tokens: int):
    profile = load_profile(None, overrides={
        "target.url": None, "sim": {"preset": PRESET, "time_scale": 1.0, "seed": 1},
        "load.concurrency": concurrency, "load.warmup_requests": 0,
        "workload.num_requests": num_requests, "workload.input_tokens": 32,
        "workload.output_tokens": output_tokens,
        "output.dir": str(tmp_path / "reports"), "output.progress": False})
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
    return {"first": np.array(first), "chunks": np.concatenate(chunks),
            "ttft_err": np.array(ttft_err), "tpot_rel": np.array(tpot_rel)}


def _p(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q))


def test_concurrency_1_matches_simulator_ground_truth(tmp_path):
    """At c=1: first token trails the simulator's send by p50 < 0.5 ms, p99 < 3 ms; TTFT exceeds
    the simulator's by -0.2..3 ms; TPOT within 1 %; chunk and token counts equal."""
    # Measured here (6 runs, 16 x 48 tokens): first-token trail min -0.11, p50 -0.05..0.07,
    # p99 0.13-0.24 ms; every chunk's trail p50 0.09-0.13 ms; TTFT error 0.5-1.6 ms (the
    # request's own trip: serialise, write, the server reads its headers); TPOT error <= 0.25 %.
    res, truth = _run_sim(tmp_path, concurrency=1, num_requests=16, output_tokens=48)
    m = _compare(res, truth)
    assert _p(m["first"], 1) >= -NEG_MARGIN_MS
    assert _p(m["first"], 50) < 0.5
    assert _p(m["first"], 99) < 3.0
    assert _p(m["chunks"], 1) >= -NEG_MARGIN_MS
    assert _p(m["chunks"], 50) < 0.5
    # Client TTFT counts from just before its write, the simulator's from its handler starting
    # (headers parsed): ours is longer by the request's trip, never shorter beyond the margin.
    assert m["ttft_err"].min() >= -0.2
    assert m["ttft_err"].max() < 3.0
    assert np.abs(m["tpot_rel"]).max() < 0.01
    tpot = res.summary["metrics"]["tpot_ms"]
    gt_tpot = np.mean([g["tpot_ms"] for g in truth.values()])
    assert abs(tpot["mean"] / gt_tpot - 1) < 0.01


def test_concurrency_64_matches_simulator_ground_truth(tmp_path):
    """At c=64: first token trails the simulator's send by p50 < 2 ms, p99 < 10 ms; TPOT within
    5 %; chunk and token counts equal."""
    # Measured here (5 runs, 128 x 32 tokens): first-token trail p50 0.04-0.7, p99 1.0-3.3 ms,
    # max 5.1 ms; every chunk's trail p50 0.5-0.9 ms, p99 1.3-3.2 ms; TPOT error <= 1.7 %.
    # TTFT is not compared at c=64: a closed loop of 64 slots sends in bursts (the whole batch
    # finishes on the same engine step), and the time from loadgen's send stamp to the
    # simulator's handler start then includes both processes working through the burst
    # (measured 2-39 ms); bench/fidelity.py --sweep reports it.
    res, truth = _run_sim(tmp_path, concurrency=64, num_requests=128, output_tokens=64)
    m = _compare(res, truth)
    assert _p(m["first"], 1) >= -NEG_MARGIN_MS
    assert _p(m["first"], 50) < 2.0
    assert _p(m["first"], 99) < 10.0
    assert _p(m["chunks"], 1) >= -NEG_MARGIN_MS
    assert _p(m["chunks"], 50) < 2.0
    assert np.abs(m["tpot_rel"]).max() < 0.05
