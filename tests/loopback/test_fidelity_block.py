"""The fidelity block: a simulator run measures its own timestamp error against the simulator's
ground truth (the same monotonic clock), and a client made slow on purpose fails it.

The block is recomputed here independently, from the two files, in plain Python: per matched
request the first-token lag (client first-token stamp - server stamp of token 1) and per chunk
the lag to the server's stamp of the last token the chunk held.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis import fidelity
from loadgen.cli.block_lines import fidelity_line
from loadgen.runner import api

from helpers import assert_within, slow_client

# A healthy client at c=4 trails the simulator's sends by 0.3-0.5 ms p99 here (first token).
HEALTHY_P99_MS = fidelity.THRESHOLDS["first_token_lag_ms"]


def sim_run(make_profile, **overrides):
    profile = make_profile(
        None,
        load__concurrency=4,
        workload__num_requests=24,
        workload__output_tokens=16,
        load__warmup_requests=0,
        server_metrics__enabled=False,
        **overrides,
    )
    return asyncio.run(api.run_async(profile))


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def recomputed(run_dir: Path) -> tuple[list[float], list[float]]:
    """(first-token lags, chunk lags) in ms, from requests.jsonl and ground_truth.jsonl."""
    truth = {t["id"]: t for t in lines(run_dir / "ground_truth.jsonl")}
    first, chunks = [], []
    for r in lines(run_dir / "requests.jsonl"):
        t = truth[r["response_id"]]
        first.append((r["t_first_token_ns"] - t["chunk_ns"][0]) / 1e6)
        held = 0
        for at, n in zip(r["chunk_times_ns"], r["chunk_tokens"]):
            held = min(held + max(n, 0), len(t["chunk_ns"]))
            if held:
                chunks.append((at - t["chunk_ns"][held - 1]) / 1e6)
    return first, chunks


@pytest.mark.timing_absolute
@pytest.mark.slow
@pytest.mark.serial  # the instrument's own timestamp error, judged against 1-2 ms: a core to itself
def test_a_simulator_run_carries_its_own_measurement_error(make_profile):
    """The block is exact against the two files; the verdict is exactly what its thresholds say
    of the figures; a healthy client (absolute: printed with its margins) passes them."""
    res = sim_run(make_profile)
    block = res.summary["fidelity"]
    assert res.summary["counts"]["ok"] == 24
    assert block["requests_matched"] == 24 and block["requests_unmatched"] == 0
    first, chunks = recomputed(res.run_dir)
    assert block["chunks_matched"] == len(chunks) >= 24 * 15
    for name, values in (("first_token_lag_ms", first), ("chunk_lag_ms", chunks)):
        got = block[name]
        assert got["count"] == len(values)
        assert got["p50"] == pytest.approx(float(np.percentile(values, 50)), abs=1e-9)
        assert got["max"] == pytest.approx(max(values), abs=1e-9)
        # One clock, and the server stamps before it writes: no token is seen before its stamp.
        assert got["min"] >= -fidelity.CLOCK_SLACK_MS
    over = [k for k, bound in fidelity.THRESHOLDS.items() if block[k]["p99"] > bound]
    assert block["verdict"] == ("fail" if over else "pass"), block["reasons"]
    # The TTFT error is the first-token lag plus the request's delivery to the server: >= the lag.
    assert block["ttft_error_ms"]["p50"] >= block["first_token_lag_ms"]["p50"] - 0.01
    assert block["ttft_error_ms"]["count"] == block["e2e_error_ms"]["count"] == 24
    assert block["tpot_error_ms"]["count"] == 24
    for name, bound in fidelity.THRESHOLDS.items():  # a healthy client passes: absolute
        assert_within(block[name]["p99"], bound, f"healthy client: {name} p99")
    assert_within(abs(block["tpot_error_ms"]["p50"]), 0.5, "healthy client: |TPOT error| p50")


@pytest.mark.slow
def test_a_client_slowed_on_purpose_shows_a_larger_error_and_fails(make_profile, monkeypatch):
    """Every read costs the client 3 ms of CPU before its stamp (test-only): reads that arrive
    together are stamped one after another, their stamps trail the server's by milliseconds, the verdict fails
    and names the lag."""
    slow_client(monkeypatch, 3.0)
    res = sim_run(make_profile)
    block = res.summary["fidelity"]
    assert block["requests_matched"] == 24
    assert block["chunk_lag_ms"]["p99"] > 3 * HEALTHY_P99_MS
    assert block["verdict"] == "fail"
    assert any(r.startswith("chunk_lag_ms p99") for r in block["reasons"]), block["reasons"]
    assert "fail" in fidelity_line(block)


def test_no_ground_truth_no_block(make_profile, server):
    res = asyncio.run(api.run_async(make_profile(server.url, server_metrics__enabled=False)))
    assert "fidelity" not in res.summary


def test_unmatched_requests_and_two_clocks_fail(tmp_path):
    """A ground truth missing a request, or stamps from another clock, fail with the reason."""
    from loadgen.analysis.table import RecordTable
    from loadgen.records import RequestRecord

    def rec(i: int, shift: int) -> RequestRecord:
        return RequestRecord(
            id=i,
            warmup=False,
            t_sched_ns=0,
            t_send_ns=1_000,
            requested_output_tokens=2,
            requested_prompt_tokens=4,
            ok=True,
            response_id=f"r{i}",
            t_first_token_ns=5_000_000 + shift,
            t_end_ns=9_000_000 + shift,
            chunk_times_ns=[5_000_000 + shift, 8_000_000 + shift],
            chunk_tokens=[1, 1],
            output_tokens=2,
        )

    truth = tmp_path / "ground_truth.jsonl"
    truth.write_text(
        json.dumps(
            {
                "id": "r0",
                "stream": True,
                "arrival_ns": 500,
                "chunk_ns": [5_000_000, 8_000_000],
                "finish_ns": 8_500_000,
                "tpot_ms": 3.0,
            }
        )
        + "\n"
    )
    block = fidelity.assess(RecordTable.from_records([rec(0, 0), rec(1, 0)]), truth)
    assert block is not None
    assert (block["requests_matched"], block["requests_unmatched"], block["verdict"]) == (1, 1, "fail")
    assert block["reasons"][0].startswith("1 ok requests have no line")
    assert block["first_token_lag_ms"]["p50"] == 0.0
    early = fidelity.assess(RecordTable.from_records([rec(0, -400_000)]), truth)
    assert early is not None and early["verdict"] == "fail"
    assert "not on one clock" in " ".join(early["reasons"])
