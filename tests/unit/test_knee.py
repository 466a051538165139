"""The knee of a latency-throughput curve (analysis.curve.knee), on literal points: where more load
stops buying throughput, not where latency first jumps."""

from __future__ import annotations

import pytest

from loadgen.analysis.curve import KNEE_SCALING, knee


def points(*rows: tuple[float, float, float]) -> list[dict]:
    """(offered, throughput, p99 TTFT) per stage."""
    return [
        {"stage": i, "name": f"c={x:g}", "offered": x, "throughput_rps": t, "ttft_ms": {"p99": ttft}}
        for i, (x, t, ttft) in enumerate(rows)
    ]


def test_a_ttft_jump_while_throughput_still_doubles_is_not_the_knee():
    """c=4 -> 8 triples p99 TTFT (prefill shares steps with decode), yet throughput doubles twice
    more: the knee is where doubling the users stops paying, at c=16."""
    curve = points((2, 10, 40), (4, 20, 45), (8, 39, 140), (16, 76, 160), (32, 80, 900))
    k = knee(curve)
    assert k is not None and (k["stage"], k["offered"], k["throughput_rps"]) == (3, 16, 76)
    assert k["next_scaling"] == pytest.approx(0.074, abs=1e-3) and k["next_scaling"] < KNEE_SCALING


def test_throughput_that_keeps_scaling_has_no_knee():
    assert knee(points((1, 5, 30), (2, 9.6, 31), (4, 18, 33), (8, 30, 40))) is None


def test_a_rate_sweep_past_saturation_knees_at_the_last_rate_served():
    """An open loop serves what it is offered until it saturates: 8 -> 16 req/s offered, 7.9 ->
    9.1 served."""
    k = knee(points((2, 2, 30), (4, 4, 31), (8, 7.9, 45), (16, 9.1, 4000)))
    assert k is not None and k["offered"] == 8


def test_steps_without_a_throughput_or_a_higher_load_are_skipped():
    curve = points((2, 10, 40), (2, 10, 41), (4, 20, 45), (8, 21, 300))
    curve[1]["throughput_rps"] = None
    k = knee(curve)
    assert k is not None and k["offered"] == 4
