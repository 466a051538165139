"""The confirming run of a capacity search: the rate the search (or its twin) proposed, run as a
user would provision it, and the rule that says whether it held.

A search's stages are short and start from idle, and near a saturation cliff a tail SLO breaks
in bursts (a Poisson schedule's clump of arrivals fills the KV cache, requests queue for seconds,
many fail together): a short stage that met the SLOs says little about the next minutes. So the
headline is never a search level. It is a rate a confirming run held: Poisson at that rate from
idle, a warm-up, then ``confirm_s`` measured seconds (by default the larger of 2 minutes and
``CONFIRM_SHARE`` of the budget), judged as MLPerf's LoadGen judges its Server scenario: not by
the attainment it happened to reach but by a confidence bound on it.

The rule. A confirmation holds when its queue did not grow and the one-sided 95 % lower bound
of its attainment is at least A. The bound is a circular-block bootstrap over time: the
measured requests in send order are cut into blocks of ``BLOCK_S`` seconds of arrivals (at
least the mean number in flight), blocks are redrawn with replacement, and the bound is the
5th percentile of the redrawn attainments. Blocks, not requests, because failures near a cliff
are correlated: a burst fails dozens of consecutive requests, and a binomial bound over
requests would count them as dozens of independent chances, far too narrow. With no failure
at all there is nothing to redraw; the bound is then the binomial rule of three, 1 - 3/n,
which is the most a run of n requests can claim.

If a confirmation does not hold, the next one runs ``STEP_DOWN`` lower, while the budget pays
for it; a search whose budget ran out with nothing confirmed says so and exits nonzero.
Numbers in, numbers out: no run, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.runner.capacity_search import resample_goods
from loadgen.summary.stages import CapacityConfirmation

CONFIRM_MIN_S = 120.0
CONFIRM_SHARE = 0.4  # of a --budget: 4 minutes buy a 2-minute confirmation, 20 minutes 8
BLOCK_S = 10.0  # a burst near a cliff fills and drains in seconds
LEVEL = 0.95  # one-sided: the bound the attainment exceeds in 95 % of redraws
STEP_DOWN = 0.05
MAX_CONFIRMATIONS = 4
RESAMPLES = 2000


def confirm_seconds(budget_s: float | None, asked_s: float | None = None) -> float:
    """The measured seconds of a confirming run: ``asked_s`` (--confirm-duration), else the
    larger of ``CONFIRM_MIN_S`` and ``CONFIRM_SHARE`` of the budget."""
    if asked_s is not None:
        return asked_s
    return CONFIRM_MIN_S if budget_s is None else max(CONFIRM_MIN_S, CONFIRM_SHARE * budget_s)


@dataclass(frozen=True)
class Confirmation:
    """One confirming run and its verdict (see the module's doc)."""

    stage: int
    rate: float
    measured_s: float
    requests: int
    attainment: float | None
    lower_bound: float | None
    block_s: float
    block_requests: int
    over_saturated: bool
    held: bool
    why: str  # why it did not hold; "" when it held

    def as_dict(self) -> CapacityConfirmation:
        return CapacityConfirmation(
            stage=self.stage,
            rate=self.rate,
            measured_s=self.measured_s,
            requests=self.requests,
            attainment=self.attainment,
            lower_bound_95=self.lower_bound,
            block_s=self.block_s,
            held=self.held,
            why=self.why or None,
        )


def lower_bound(flags: np.ndarray, block: int, seed: int, resamples: int = RESAMPLES) -> float | None:
    """The one-sided 95 % lower bound of the attainment ``flags.mean()`` (the module's rule)."""
    n = int(flags.size)
    if n == 0:
        return None
    if flags.all():
        return max(0.0, 1.0 - 3.0 / n)  # the rule of three: no failure to redraw
    goods = resample_goods(flags, block, resamples, np.random.default_rng([seed, 11])) / n
    return float(np.percentile(goods, (1 - LEVEL) * 100, method="lower"))


def judge(
    stage: int,
    rate: float,
    flags: np.ndarray,
    *,
    measured_s: float,
    in_flight: float,
    over_saturated: bool,
    target: float,
    seed: int,
) -> Confirmation:
    """A confirming run's verdict from its measured requests' good flags in send order."""
    block = max(1, round(in_flight), round(rate * BLOCK_S))
    att = float(flags.mean()) if flags.size else None
    bound = lower_bound(flags, block, seed)
    why = ""
    if att is None:
        why = "no request finished"
    elif over_saturated:
        why = "its queue grew while it ran"
    elif bound is None or bound < target:
        why = f"lower 95 % bound {_pct(bound)} < {_pct(target)} (attained {_pct(att)})"
    return Confirmation(
        stage, rate, measured_s, int(flags.size), att, bound, BLOCK_S, block, over_saturated, not why, why
    )


def statement(c: Confirmation, target: float) -> str:
    """'31.2 req/s sustainable: a 2-minute run at it met 99.6 % of requests' SLOs (A = 99 %);
    lower 95 % bound 99.3 % (block bootstrap over 10 s blocks)'."""
    return (
        f"{_num(c.rate)} req/s sustainable: a {_span(c.measured_s)} run at it met {_pct(c.attainment)} "
        f"of requests' SLOs (A = {_pct(target)}); lower 95 % bound {_pct(c.lower_bound)} "
        f"(block bootstrap over {c.block_s:g} s blocks)"
    )


def _span(seconds: float) -> str:
    """'2-minute' within 3 s of whole minutes (the measured window of a 2-minute run ends at its
    last request, a second or two short), else '95-second'."""
    minutes = round(seconds / 60)
    return f"{minutes}-minute" if minutes and abs(seconds - 60 * minutes) <= 3 else f"{seconds:.0f}-second"


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    text = f"{x * 100:.1f}"
    return f"{text.rstrip('0').rstrip('.') if x < 1 else '100'} %"


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"
