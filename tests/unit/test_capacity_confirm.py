"""The confirming run's rule (a lower 95 % bound over blocks of time), the plan's confirmation
phase (propose, confirm, step down, the budget), and a stage's figures over its measured window."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.config.stages import Stage
from loadgen.records import CANCELLED, RequestRecord
from loadgen.runner.capacity_confirm import BLOCK_S, judge, lower_bound, statement
from loadgen.runner.capacity_search import Search
from loadgen.runner.capacity_stages import CapacityPlan, StageMeasure, measure
from loadgen.runner.driver import DriveResult
from loadgen.runner.plan import StageOutcome


def flags(att: float, n: int = 200) -> np.ndarray:
    out = np.ones(n, dtype=bool)
    out[: round(n * (1 - att))] = False
    return out


def test_the_bound_is_honest_about_bursts_and_claims_no_more_than_n_requests_allow():
    # 3600 requests (2 minutes at 30/s), 20 failures: spread out, the bound is close to the
    # attainment; in one burst (as a queue fails them), blocks of 10 s of arrivals redraw the
    # burst whole, twice in some resamples: the bound is far lower.
    spread = np.ones(3600, dtype=bool)
    spread[::180] = False
    burst = np.ones(3600, dtype=bool)
    burst[1800:1820] = False
    block = round(30 * BLOCK_S)
    assert lower_bound(spread, 1, seed=0) == pytest.approx(0.9924, abs=0.001)  # binomial-like
    assert lower_bound(burst, block, seed=0) < 0.99 < lower_bound(spread, 1, seed=0)
    # no failure: nothing to redraw, so the rule of three
    assert lower_bound(np.ones(600, dtype=bool), block, seed=0) == pytest.approx(1 - 3 / 600)
    assert lower_bound(np.ones(0, dtype=bool), block, seed=0) is None


def test_a_confirmation_holds_on_its_bound_not_on_its_attainment():
    held = judge(
        7,
        30.0,
        np.ones(3600, dtype=bool),
        measured_s=120.0,
        in_flight=20.0,
        over_saturated=False,
        target=0.99,
        seed=1,
    )
    assert held.held and held.why == "" and held.block_requests == 300
    assert statement(held, 0.99) == (
        "30 req/s sustainable: a 2-minute run at it met 100 % of requests' SLOs (A = 99 %); "
        "lower 95 % bound 99.9 % (block bootstrap over 10 s blocks)"
    )
    burst = np.ones(3600, dtype=bool)
    burst[1000:1030] = False  # attained 99.2 %, in one burst
    close = judge(8, 30.0, burst, measured_s=120.0, in_flight=20.0, over_saturated=False, target=0.99, seed=1)
    assert close.attainment == pytest.approx(0.99167, abs=1e-4) and not close.held
    assert close.why.startswith("lower 95 % bound") and "< 99 %" in close.why
    grew = judge(
        9,
        30.0,
        np.ones(3600, dtype=bool),
        measured_s=120.0,
        in_flight=20.0,
        over_saturated=True,
        target=0.99,
        seed=1,
    )
    assert not grew.held and grew.why == "its queue grew while it ran"


def _outcome(stage: Stage, records: list[RequestRecord], ended_s: float) -> StageOutcome:
    return StageOutcome(stage, DriveResult(records, 0, int(ended_s * 1e9), False))


def _stage(index: int, rate: float, seconds: float, warm: int, drain: float | None = None) -> Stage:
    return Stage(
        index, f"rate={rate:g}", None, rate, "poisson", 1.0, None, seconds, None, 0.0, warm, drain_s=drain
    )


def _record(i: int, at_s: float, ttft_s: float | None, end_s: float, warmup: bool = False) -> RequestRecord:
    r = RequestRecord(i, warmup, int(at_s * 1e9), int(at_s * 1e9), 10, 100)
    r.stage, r.prompt_tokens = 0, 100
    r.t_end_ns = int(end_s * 1e9)
    if ttft_s is None:  # cut by the drain limit before its first token
        r.ok, r.error_class = False, CANCELLED
        return r
    first = int((at_s + ttft_s) * 1e9)
    r.ok, r.t_first_token_ns, r.output_tokens = True, first, 10
    r.chunk_times_ns, r.chunk_tokens = [first, r.t_end_ns], [1, 9]
    return r


def test_a_stage_is_measured_over_its_measured_window_and_a_cut_request_counts_only_if_it_missed():
    # 10 s stage at 2/s: 4 warm-up requests in the first 2 s, 16 measured over 8 s (2 .. 10 s)
    recs = [_record(i, i * 0.5, 0.1, i * 0.5 + 0.5, warmup=i < 4) for i in range(20)]
    m = measure(_outcome(_stage(0, 2.0, 10.0, 4), recs, 10.5), {"ttft_ms": 700.0})
    assert m.window_s == pytest.approx(8.0) and m.flags.size == 16
    # 16 ok over the 8 s measured, not 20 over the 10.5 s stage (the warm-up's too)
    assert (m.throughput_rps, m.goodput_rps) == (pytest.approx(2.0), pytest.approx(2.0))
    assert m.output_tokens_per_s == pytest.approx(20.0)
    # Two requests cut by the drain limit without a first token: one had waited 3 s (past the
    # 700 ms TTFT bound: a failure), one 0.2 s (unknown: not counted).
    cut = [*recs, _record(20, 7.0, None, 10.0), _record(21, 9.8, None, 10.0)]
    m = measure(_outcome(_stage(0, 2.0, 10.0, 4, drain=0.0), cut, 10.5), {"ttft_ms": 700.0})
    assert m.flags.size == 17 and m.attainment == pytest.approx(16 / 17)


def test_one_late_send_of_a_short_stage_is_not_a_client_bottleneck():
    recs = [_record(i, i * 0.5, 0.1, i * 0.5 + 0.5) for i in range(28)]
    recs[5].t_send_ns += int(0.0104e9)  # one send 10.4 ms late: the p99 of 28 sends
    m = measure(_outcome(_stage(0, 2.0, 14.0, 0), recs, 14.5), {"ttft_ms": 700.0})
    assert m.client_lag_p99_ms is None
    for r in recs[:6]:  # six late sends of 28: the client did not keep up
        r.t_send_ns = r.t_sched_ns + int(0.020e9)
    assert measure(_outcome(_stage(0, 2.0, 14.0, 0), recs, 14.5), {"ttft_ms": 700.0}).client_lag_p99_ms


def _held(plan: CapacityPlan, index: int, rate: float, att: float) -> None:
    """Tell the plan its confirmation stage ``index`` at ``rate`` attained ``att``."""
    plan.confirm_stages[index] = StageMeasure(rate, flags(att, 3600), stage=index, window_s=120.0)
    plan.taken += 1
    c = judge(
        index,
        rate,
        flags(att, 3600),
        measured_s=120.0,
        in_flight=10.0,
        over_saturated=False,
        target=plan.search.target,
        seed=0,
    )
    plan.confirmations.append(c)


def test_a_failed_confirmation_steps_down_and_the_budget_ends_it_unconfirmed():
    plan = CapacityPlan(Search(4.0, 0.99), {"ttft_ms": 700.0}, stage_s=10.0, warmup_s=2.0, budget_s=300.0)
    plan.add(StageMeasure(4.0, flags(1.0), stage=0))
    plan.add(StageMeasure(8.0, flags(0.5), stage=1))
    plan.search.stopped_because = "test: the search is over"
    first = plan.next_stage([object(), object()])  # type: ignore[list-item]
    assert first is not None and first.name == "confirm rate=4" and first.duration_s == 122.0
    _held(plan, 2, 4.0, 0.985)  # below A: it did not hold
    plan.spent_s = 130.0
    second = plan.next_stage([object()] * 3)  # type: ignore[list-item]
    assert second is not None and second.rate == 3.8  # 5 % lower
    _held(plan, 3, 3.8, 1.0)
    block = plan.conclude(False)
    assert (block["capacity_rps"], block["verdict"]) == (3.8, "confirmed")
    assert [c["held"] for c in block["confirmations"]] == [False, True]
    assert block["proposal"] == {
        "rate": 4.0,
        "by": "search",
        "twin": None,
        "above_confirmed": pytest.approx(4 / 3.8 - 1),
    }
    assert block["cliff"]["bracket"] == [4.0, 8.0] and block["ci95"] == [None, None]

    broke = CapacityPlan(Search(4.0, 0.99), {"ttft_ms": 700.0}, stage_s=10.0, warmup_s=2.0, budget_s=300.0)
    broke.add(StageMeasure(4.0, flags(1.0), stage=0))
    broke.add(StageMeasure(8.0, flags(0.5), stage=1))
    broke.search.stopped_because = "test: the search is over"
    assert broke.next_stage([object(), object()]) is not None  # type: ignore[list-item]
    _held(broke, 2, 4.0, 0.95)
    broke.spent_s = 250.0  # 50 s left: not a 122 s confirmation
    assert broke.next_stage([object()] * 3) is None  # type: ignore[list-item]
    block = broke.conclude(False)
    assert (block["capacity_rps"], block["verdict"]) == (None, "unconfirmed")
    assert block["unconfirmed_because"] == "time budget of 300 s spent before a confirming run held"
