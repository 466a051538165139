"""The capacity search's stages (``capacity.py`` runs the search as one run): each finished
stage measured on its measured requests (its good flags and the figures of its table row),
told to the search, and the next level made a stage (Poisson, a warm-up that grows with the
end-to-end latency, long enough for a minimum of requests); then the confirming runs
(``capacity_confirm.py``) of the proposed rate. A client-limited stage is not counted and its
level is measured again; a second one there, or a stage with server errors, ends the search."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, cast

import numpy as np
import pandas as pd

from loadgen.analysis import metrics, saturation
from loadgen.analysis import sla as sla_mod
from loadgen.analysis.cost import CostInputs
from loadgen.config.sla import SlaConfig
from loadgen.config.stages import Stage
from loadgen.records import CANCELLED
from loadgen.runner.capacity_confirm import (
    MAX_CONFIRMATIONS,
    STEP_DOWN,
    Confirmation,
    confirm_seconds,
    judge,
)
from loadgen.runner.capacity_result import capacity_block
from loadgen.runner.capacity_search import Observation, Search
from loadgen.runner.plan import StageOutcome
from loadgen.summary import Capacity, StageSummary
from loadgen.summary.stages import CapacityTwin

CLIENT_LAG_LIMIT_MS = 10.0
LATE_SENDS_MIN = 5  # late sends a stage needs before the client is called the bottleneck
ERROR_RATE_LIMIT = 0.05
# Bootstrap blocks are at least a fifth of a stage's requests: near a cliff failures come in
# bursts of seconds, far longer than the requests in flight (the figures in docs/metrics.md).
BLOCKS = 5
# A screen's requests still in flight this long after its last send are cut (Stage.drain_s): a
# screen past the cliff has said what it had to say, and its queue could take minutes to drain.
SCREEN_DRAIN_S = 10.0
# Seconds of a budget held back for the twin's fit and its own virtual-time search; without a
# twin, for the confirmation's warm-up and drain, which grow as the search meets longer
# requests after the share was set (else the confirmation no longer fits: 3 of 20 seeds).
TWIN_RESERVE_S = 40.0
SLACK_S = 10.0
# The command's own seconds outside its stages: starting the simulator and the preflight before
# the first, the summary and the report after the last (4 s measured on the 4-minute cliff run,
# which ended at 4 min 4 s before this was held back).
FINISH_S = 5.0


@dataclass(frozen=True)
class StageMeasure(Observation):
    """A stage's observation and the figures its table row shows."""

    stage: int = 0
    error_rate: float | None = None
    throughput_rps: float | None = None
    goodput_rps: float | None = None
    output_tokens_per_s: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    client_lag_p99_ms: float | None = None  # set only when the client was the bottleneck
    e2e_mean_ms: float | None = None
    mean_concurrency: float | None = None
    saturation: str = "undetermined"  # the stage's verdict (analysis/saturation.py)

    @property
    def attainment(self) -> float | None:
        return float(self.flags.mean()) if self.flags.size else None


def measure(outcome: StageOutcome, slos: dict[str, float]) -> StageMeasure:
    """A finished stage's good flags and figures, on its measured (non-warm-up) requests. Its
    window is the time from the first one's schedule to the stage's end: the rate it offered,
    its throughput, goodput and tokens/s are its measured requests over that window (Poisson
    counts stray: 700 requests in 7 s at 108/s is one sigma low), never over the warm-up too.
    A request the stage's drain limit cut (``Stage.drain_s``) counts as failed when it had
    already missed an SLO (no first token after the TTFT bound, or running past the E2E bound)
    and is left out otherwise: what it would have done is unknown."""
    stage, records = outcome.stage, outcome.table()
    s = metrics.summarize(records, sla=SlaConfig.model_validate(slos))
    frame = metrics.request_frame(records)
    m = frame[~frame["warmup"].to_numpy()].sort_values("id")  # records come in finishing order
    ok = m["ok"].to_numpy(dtype=bool)
    cancelled = (m["error_class"] == CANCELLED).to_numpy()
    counted = ok | ~cancelled | (cancelled & _missed(m, slos))
    good = sla_mod.good_mask(ok, {k: m[k].to_numpy(dtype=float) for k in slos}, slos)
    window = None
    if len(m) and stage.duration_s is not None:
        first = int(m["t_sched_ns"].min()) - outcome.result.started_ns
        window = max(stage.duration_s - first / 1e9, 1e-3)
    lag = _client_lag(m)
    verdict = saturation.assess(records)["verdict"]
    mm = s["metrics"]
    p99 = {k: cast(dict, mm).get(k, {}).get("p99") for k in slos}  # the SLO metrics' tails
    tokens = m["output_tokens"].to_numpy(dtype=float, na_value=0.0)[ok].sum()
    return StageMeasure(
        rate=float(stage.rate or 0.0),
        flags=good[counted],
        block=max(1, round(mm["mean_concurrency"] or 1), int(counted.sum()) // BLOCKS),
        window_s=window,
        over_saturated=verdict == "over_saturated",
        stage=stage.index,
        error_rate=s["counts"]["error_rate"],
        throughput_rps=None if window is None else float(ok.sum()) / window,
        goodput_rps=None if window is None else float(good.sum()) / window,
        output_tokens_per_s=None if window is None else float(tokens) / window,
        ttft_p99_ms=mm["ttft_ms"]["p99"],
        tpot_p99_ms=mm["tpot_ms"]["p99"],
        client_lag_p99_ms=lag,
        e2e_mean_ms=mm["e2e_ms"]["mean"],
        mean_concurrency=mm["mean_concurrency"],
        saturation=verdict,
        far=bool(len(m)) and all((p99.get(k) or 0.0) < v / 2 for k, v in slos.items()),
    )


def _missed(m: pd.DataFrame, slos: dict[str, float]) -> np.ndarray:
    """Which requests had missed an SLO by the time they ended (for those the stage cut)."""
    ran_ms = (
        m["t_end_ns"].to_numpy(dtype=float, na_value=np.nan) - m["t_send_ns"].to_numpy(dtype=float)
    ) / 1e6
    no_token = m["t_first_token_ns"].isna().to_numpy()
    missed = np.zeros(len(m), dtype=bool)
    if "ttft_ms" in slos:
        missed |= no_token & (ran_ms > slos["ttft_ms"])
    if "e2e_ms" in slos:
        missed |= ran_ms > slos["e2e_ms"]
    return missed


def _client_lag(m: pd.DataFrame) -> float | None:
    """The measured sends' p99 lag (``t_send - t_sched``, ms) when the client was the bottleneck:
    more than 1 % of sends late by over ``CLIENT_LAG_LIMIT_MS``, and at least ``LATE_SENDS_MIN``
    of them (a p99 of 28 sends is their maximum: one late send is not a bottleneck); else None."""
    lag = (m["t_send_ns"].to_numpy(dtype=float) - m["t_sched_ns"].to_numpy(dtype=float)) / 1e6
    late = int((lag > CLIENT_LAG_LIMIT_MS).sum())
    if late < LATE_SENDS_MIN or late <= 0.01 * lag.size:
        return None
    return float(np.percentile(lag, 99.0))


class Proposer(Protocol):
    """What proposes the rate to confirm from the search's stages: the fitted twin
    (``capacity_twin.Twin``). ``propose`` returns the proposal, or why it has none."""

    def propose(self, outcomes: Sequence[StageOutcome], plan: CapacityPlan) -> Proposal: ...


@dataclass(frozen=True)
class Proposal:
    """The rate to confirm first, who proposed it (``search``: its highest passing level;
    ``twin``: the fitted simulator's own search), and what the twin said (its fit, its answer,
    or why it could not propose, in which case the search's level is confirmed)."""

    rate: float | None
    by: Literal["twin", "search"]
    twin: CapacityTwin | None = None


class CapacityPlan:
    """The search as a StagePlan, then its confirmation. Searching, each finished stage is
    measured and observed and the next level becomes the next stage (Poisson, ``warmup_s`` +
    ``stage_s``, at least ``min_requests`` measured requests); once the search is over (its
    rules, or its share of the budget: the confirmation's time is held back), the proposal (the
    twin's when a ``proposer`` is given and can, else the highest passing level) is confirmed
    by a run of ``confirm_s`` (``capacity_confirm.py``), stepping down while it does not hold
    and the budget pays."""

    def __init__(
        self,
        search: Search,
        slos: dict[str, float],
        *,
        stage_s: float = 15.0,
        warmup_s: float = 5.0,
        min_requests: int = 30,
        screen_requests: int = 10,
        budget_s: float | None = None,
        bracket_s: float = 5.0,
        confirm_s: float | None = None,
        proposer: Proposer | None = None,
        on_stage: Callable[[StageMeasure, bool], None] | None = None,
        on_confirm: Callable[[Confirmation], None] | None = None,
        costs: CostInputs | None = None,
        seed: int = 0,
        method: str = "",
        proposer_time_s: float | None = None,
    ) -> None:
        self.search, self.slos = search, slos
        # What the proposer's time costs the budget: its wall time (None), or a fixed figure
        # (a virtual-time harness, whose results must not depend on how busy its machine is).
        self.proposer_time_s = proposer_time_s
        self.costs, self.seed, self.method = costs, seed, method
        self.stage_s, self.warmup_s, self.min_requests = stage_s, warmup_s, min_requests
        self.screen_requests = screen_requests
        self.budget_s, self.bracket_s = budget_s, bracket_s
        self.confirm_s = confirm_seconds(budget_s, confirm_s)
        self.proposer = proposer
        self.on_stage, self.on_confirm = on_stage, on_confirm
        self.measures: list[StageMeasure] = []
        self.taken = 0  # finished stages told (``add``) or judged so far
        self.spent_s = 0.0  # wall seconds the stages so far took, drains (and the twin) included
        self.screens: set[int] = set()  # the stages of the bracketing phase (short: screens)
        self.confirm_stages: dict[int, StageMeasure | None] = {}
        self.confirmations: list[Confirmation] = []
        self.proposal: Proposal | None = None
        self.unconfirmed: str | None = None  # why nothing was confirmed, once that is known
        self.client_flags: dict[float, int] = {}  # rate -> stages the client lagged at
        self.client_ended = False

    # --- the stages -------------------------------------------------------------------------

    def next_stage(self, done: Sequence[StageOutcome]) -> Stage | None:
        for o in done[self.taken :]:
            self._take(o)
        if self.proposal is None:
            rate = self.search.next_rate()
            stage = None if rate is None else self._search_stage(rate, len(done))
            if stage is not None:
                return stage
            self.proposal = self._propose(done)
        return self._confirm_stage(len(done))

    def _take(self, o: StageOutcome) -> None:
        m = measure(o, self.slos)
        self.spent_s += (o.result.ended_ns - o.result.started_ns) / 1e9
        if o.stage.index not in self.confirm_stages:
            self.add(dataclasses.replace(m, screening=o.stage.index in self.screens))
            return
        self.confirm_stages[o.stage.index] = m
        self.taken += 1
        c = judge(
            o.stage.index,
            m.rate,
            m.flags,
            measured_s=m.window_s or 0.0,
            in_flight=m.mean_concurrency or 1.0,
            over_saturated=m.over_saturated,
            target=self.search.target,
            seed=self.seed,
        )
        if m.client_lag_p99_ms is not None:  # the rate was not offered: it confirms nothing
            c = dataclasses.replace(
                c, held=False, why=f"the client lagged (p99 send lag {m.client_lag_p99_ms:.1f} ms)"
            )
        self.confirmations.append(c)
        if self.on_confirm is not None:
            self.on_confirm(c)

    def warm(self) -> tuple[float, float]:
        """(the next stage's warm-up, the mean E2E seconds at passing stages): a batch takes
        about an E2E to fill, so the warm-up is at least twice it."""
        e2e_ms = max((m.e2e_mean_ms or 0.0 for m in self.measures if self.passed(m)), default=0.0)
        return max(self.warmup_s, round(2 * e2e_ms / 1e3, 1)), e2e_ms / 1e3

    def _search_stage(self, rate: float, index: int) -> Stage | None:
        warm, e2e_s = self.warm()
        screening = None in self.search.bracket()
        measured_s = self.measured_s(rate, warm, e2e_s)
        if measured_s is None:
            return None
        if screening:
            self.screens.add(index)
        return Stage(
            index,
            f"rate={rate:g}",
            None,
            rate,
            "poisson",
            1.0,
            None,
            warm + measured_s,
            None,
            0.0,
            round(rate * warm),
            drain_s=SCREEN_DRAIN_S if screening else None,
        )

    def reserve_s(self) -> float:
        """Seconds of the budget the search leaves for a confirmation: its warm-up, measured
        part and drain, the twin's fit and search, and the command's own start and finish."""
        twin = TWIN_RESERVE_S if self.proposer is not None else SLACK_S
        return self.confirm_cost_s() + twin + FINISH_S

    def confirm_cost_s(self) -> float:
        """Seconds a confirming run takes: its warm-up, its measured part, and the drain of what
        is in flight at its end (about an E2E)."""
        warm, e2e_s = self.warm()
        return warm + self.confirm_s + e2e_s

    def twin_seconds(self) -> float:
        """Wall seconds the twin may take from now: what the budget has left beyond the
        confirmation (no limit without a budget, or when its time is not the wall's)."""
        if self.budget_s is None or self.proposer_time_s is not None:
            return math.inf
        return max(0.0, self.budget_s - self.spent_s - (self.confirm_cost_s() + FINISH_S) - 1.0)

    def measured_s(self, rate: float, warm: float, e2e_s: float) -> float | None:
        """How long the next search stage measures, or None when its share of the time budget
        (the budget less ``reserve_s``) cannot pay for it. Bracketing (no passing level below a
        failing one yet): a screen of ``bracket_s`` and at least ``screen_requests`` requests,
        for doubling only needs to see where the SLOs break (a screened pass is measured again
        at length). Refining: at least ``stage_s`` and ``min_requests`` requests (the
        over-saturation verdict's minimum), and with a budget the seconds left shared among the
        stages the bisection still needs (near the boundary a longer stage is the only way to
        see the bursts that break a tail SLO); a screened level far below every SLO is measured
        again at ``stage_s`` only: its share would buy nothing there."""
        lo, hi = self.search.bracket()
        bracketing = lo is None or hi is None
        want = (
            max(self.bracket_s, self.screen_requests / rate)
            if bracketing
            else max(self.stage_s, self.min_requests / rate)
        )
        if self.budget_s is None:
            return want
        overhead = warm + e2e_s  # the warm-up before it and the drain after it
        left = self.budget_s - self.reserve_s() - self.spent_s
        if left - overhead < want:
            gap = "" if bracketing else f"; the bracket is {lo:g}-{hi:g} req/s"
            self.search.stopped_because = (
                f"the search's share of the {self.budget_s:g} s budget spent "
                f"({self.reserve_s():.0f} s held back to confirm){gap}"
            )
            return None
        at_lo = [o for o in self.search.observed if o.rate == lo]
        far_screen = rate == lo and all(o.screening for o in at_lo) and any(o.far for o in at_lo)
        if bracketing or far_screen:
            return want
        return max(want, left / self.search.stages_left() - overhead)

    def add(self, m: StageMeasure) -> None:
        """Tell the search. A client-limited stage is not counted: its level is measured again
        unless the client lagged there before (then the client ended the search); a stage with
        server errors ends the search."""
        self.measures.append(m)
        self.taken += 1
        s = self.search
        if m.client_lag_p99_ms is not None:
            self.client_flags[m.rate] = self.client_flags.get(m.rate, 0) + 1
            if self.client_flags[m.rate] >= 2:
                self.client_ended = True
                s.stopped_because = (
                    f"the client was the bottleneck at {m.rate:g} req/s twice: p99 send lag "
                    f"{m.client_lag_p99_ms:.1f} ms > {CLIENT_LAG_LIMIT_MS:g} ms (those stages are not "
                    "counted); use more worker processes (client.workers) or a lower --max-rate"
                )
        else:
            s.observe(m)
            if m.error_rate is not None and m.error_rate > ERROR_RATE_LIMIT:
                s.stopped_because = (
                    f"the server failed {m.error_rate:.1%} of requests at {m.rate:g} req/s "
                    f"(> {ERROR_RATE_LIMIT:.0%})"
                )
            elif m.attainment is None:
                s.stopped_because = f"no request finished at {m.rate:g} req/s"
        if self.on_stage is not None:
            self.on_stage(m, self.passed(m))

    def passed(self, m: StageMeasure) -> bool:
        """Met the attainment, and its queue did not grow while it ran."""
        return m.attainment is not None and m.attainment >= self.search.target and not m.over_saturated

    # --- the confirmation -------------------------------------------------------------------

    def _propose(self, done: Sequence[StageOutcome]) -> Proposal:
        """The rate to confirm first: the twin's, else the search's highest passing level; none
        when nothing passed or the client ended the search."""
        lo, _ = self.search.bracket()
        if self.client_ended or lo is None:
            return Proposal(None, "search")
        if self.proposer is None:
            return Proposal(lo, "search")
        t0 = time.perf_counter()
        proposal = self.proposer.propose(done, self)
        took = time.perf_counter() - t0
        self.spent_s += took if self.proposer_time_s is None else self.proposer_time_s
        if proposal.rate is None:  # the twin could not: the search's level, and why not the twin's
            return Proposal(lo, "search", proposal.twin)
        return proposal

    def _confirm_stage(self, index: int) -> Stage | None:
        last = self.confirmations[-1] if self.confirmations else None
        if last is not None and last.held:
            return None
        p = self.proposal
        if p is None or p.rate is None:
            self.unconfirmed = "nothing to confirm: " + (
                "the client ended the search" if self.client_ended else "no search level met the SLOs"
            )
            return None
        if len(self.confirmations) >= MAX_CONFIRMATIONS:
            self.unconfirmed = f"{MAX_CONFIRMATIONS} confirming runs, none held"
            return None
        rate = p.rate if last is None else float(f"{last.rate * (1 - STEP_DOWN):.4g}")
        if self.budget_s is not None and self.budget_s - self.spent_s < self.confirm_cost_s():
            self.unconfirmed = (
                f"time budget of {self.budget_s:g} s spent before a confirming run held"
                if last is not None
                else f"time budget of {self.budget_s:g} s spent before a confirming run could start"
            )
            return None
        self.confirm_stages[index] = None
        warm = self.warm()[0]
        return Stage(
            index,
            f"confirm rate={rate:g}",
            None,
            rate,
            "poisson",
            1.0,
            None,
            warm + self.confirm_s,
            None,
            0.0,
            round(rate * warm),
        )

    def confirmed(self) -> Confirmation | None:
        """The confirmation that held (the last one run), or None."""
        last = self.confirmations[-1] if self.confirmations else None
        return last if last is not None and last.held else None

    def conclude(self, interrupted: bool) -> Capacity:
        """The search's result, for summary.json's ``capacity`` block (and capacity.json)."""
        if interrupted:
            self.search.stopped_because = (
                "interrupted (Ctrl-C or SIGTERM); the stage running then is not counted"
            )
        return capacity_block(self, interrupted)

    def curve_order(self, stages: Sequence[StageSummary]) -> list[StageSummary]:
        """The stages ran in search order; the curve reads them in order of offered rate."""
        return sorted(stages, key=lambda st: st["load"]["rate"] or 0.0)
