"""The capacity search's stages (``capacity.py`` runs the search as one run): each finished
stage measured on its measured requests (its good flags and the figures of its table row),
told to the search, and the next level made a stage (Poisson, a warm-up that grows with the
end-to-end latency, long enough for a minimum of requests). A client-limited stage is not
counted; it, or a stage with server errors, ends the search."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import cast

import numpy as np

from loadgen.analysis import metrics, saturation
from loadgen.analysis import sla as sla_mod
from loadgen.analysis.cost import CostInputs, per_million
from loadgen.config.stages import Stage
from loadgen.records import CANCELLED
from loadgen.runner.capacity_search import Observation, Search, interval
from loadgen.runner.plan import StageOutcome
from loadgen.summary import Capacity, StageSummary

CLIENT_LAG_LIMIT_MS = 10.0
ERROR_RATE_LIMIT = 0.05
# Bootstrap blocks are at least a fifth of a stage's requests: near a cliff failures come in
# bursts of seconds, far longer than the requests in flight (the figures in docs/metrics.md).
BLOCKS = 5


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
    client_lag_p99_ms: float | None = None  # set only when over CLIENT_LAG_LIMIT_MS
    e2e_mean_ms: float | None = None
    saturation: str = "undetermined"  # the stage's verdict (analysis/saturation.py)

    @property
    def attainment(self) -> float | None:
        return float(self.flags.mean()) if self.flags.size else None


def measure(outcome: StageOutcome, slos: dict[str, float]) -> StageMeasure:
    """A finished stage's good flags and figures, on its measured (non-warm-up) requests; the
    rate it offered is its measured requests over the time from the first one's schedule to
    the stage's end (Poisson counts stray: 700 requests in 7 s at 108/s is one sigma low)."""
    stage, records = outcome.stage, outcome.table()
    s = metrics.summarize(records, sla=SimpleNamespace(**slos))
    frame = metrics.request_frame(records)
    m = frame[~frame["warmup"].to_numpy()].sort_values("id")  # records come in finishing order
    ok = m["ok"].to_numpy(dtype=bool)
    counted = ok | (m["error_class"] != CANCELLED).to_numpy()
    good = sla_mod.good_mask(ok, {k: m[k].to_numpy(dtype=float) for k in slos}, slos)
    window = None
    if len(m) and stage.duration_s is not None:
        first = int(m["t_sched_ns"].min()) - outcome.result.started_ns
        window = max(stage.duration_s - first / 1e9, 1e-3)
    lag = metrics.client_limits(records, lag_threshold_ms=CLIENT_LAG_LIMIT_MS)
    verdict = saturation.assess(records)["verdict"]
    mm = s["metrics"]
    e2e_ms = mm["e2e_ms"]["mean"]
    p99 = {k: cast(dict, mm).get(k, {}).get("p99") for k in slos}  # the SLO metrics' tails
    return StageMeasure(
        rate=float(stage.rate or 0.0),
        flags=good[counted],
        block=max(1, round(mm["mean_concurrency"] or 1), int(counted.sum()) // BLOCKS),
        window_s=window,
        over_saturated=verdict == "over_saturated",
        stage=stage.index,
        error_rate=s["counts"]["error_rate"],
        throughput_rps=mm["request_throughput_rps"],
        goodput_rps=mm["goodput"]["requests_per_s"],
        output_tokens_per_s=mm["output_tokens_per_s"],
        ttft_p99_ms=mm["ttft_ms"]["p99"],
        tpot_p99_ms=mm["tpot_ms"]["p99"],
        client_lag_p99_ms=None if lag is None else lag["client_lag_p99_ms"],
        e2e_mean_ms=e2e_ms,
        saturation=verdict,
        far=bool(len(m)) and all((p99.get(k) or 0.0) < v / 2 for k, v in slos.items()),
    )


class CapacityPlan:
    """The search as a StagePlan: each finished stage is measured and observed, then the next
    level becomes the next stage (Poisson, ``warmup_s`` + ``stage_s``, at least ``min_requests``
    measured requests)."""

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
        on_stage: Callable[[StageMeasure, bool], None] | None = None,
        costs: CostInputs | None = None,
        seed: int = 0,
        method: str = "",
    ) -> None:
        self.search, self.slos = search, slos
        self.costs, self.seed, self.method = costs, seed, method
        self.stage_s, self.warmup_s, self.min_requests = stage_s, warmup_s, min_requests
        self.screen_requests = screen_requests
        self.budget_s, self.bracket_s = budget_s, bracket_s
        self.on_stage = on_stage
        self.measures: list[StageMeasure] = []
        self.spent_s = 0.0  # wall seconds the stages so far took, drains included
        self.screens: set[int] = set()  # the stages of the bracketing phase (short: screens)

    def next_stage(self, done: Sequence[StageOutcome]) -> Stage | None:
        for o in done[len(self.measures) :]:
            m = measure(o, self.slos)
            self.add(dataclasses.replace(m, screening=o.stage.index in self.screens))
            self.spent_s += (o.result.ended_ns - o.result.started_ns) / 1e9
        rate = self.search.next_rate()
        if rate is None:
            return None  # the search is over, ``stopped_because`` says why when not on its rules
        e2e_ms = max((m.e2e_mean_ms or 0.0 for m in self.measures if self.passed(m)), default=0.0)
        warm = max(self.warmup_s, round(2 * e2e_ms / 1e3, 1))
        if None in self.search.bracket():
            self.screens.add(len(done))  # still bracketing: this stage is a screen
        measured_s = self.measured_s(rate, warm, e2e_ms / 1e3)
        if measured_s is None:
            return None
        return Stage(
            len(done), f"rate={rate:g}", None, rate, "poisson", 1.0, None,
            warm + measured_s, None, 0.0, round(rate * warm),
        )  # fmt: skip

    def measured_s(self, rate: float, warm: float, e2e_s: float) -> float | None:
        """How long the next stage measures, or None when the time budget cannot pay for it.
        Bracketing (no passing level below a failing one yet): a screen of ``bracket_s`` and at
        least ``screen_requests`` requests, for doubling only needs to see where the SLOs break
        (a screened pass is measured again at length). Refining: at least ``stage_s`` and
        ``min_requests`` requests (the over-saturation verdict's minimum), and with a budget the
        seconds left shared among the stages the bisection still needs (near the boundary a
        longer stage is the only way to see the bursts that break a tail SLO)."""
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
        if self.budget_s - self.spent_s - overhead < want:
            gap = "" if bracketing else f"; the bracket is {lo:g}-{hi:g} req/s"
            self.search.stopped_because = f"time budget of {self.budget_s:g} s spent{gap}"
            return None
        if bracketing:
            return want
        return max(want, (self.budget_s - self.spent_s) / self.search.stages_left() - overhead)

    def add(self, m: StageMeasure) -> None:
        """Tell the search; a client-limited stage is not counted, and it or a stage with server
        errors ends the search."""
        self.measures.append(m)
        s = self.search
        if m.client_lag_p99_ms is not None:
            s.stopped_because = (
                f"the client was the bottleneck at {m.rate:g} req/s: p99 send lag "
                f"{m.client_lag_p99_ms:.1f} ms > {CLIENT_LAG_LIMIT_MS:g} ms (that stage is not counted)"
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

    def conclude(self, interrupted: bool) -> Capacity:
        """The search's result, for summary.json's ``capacity`` block (and capacity.json)."""
        if interrupted:
            self.search.stopped_because = (
                "interrupted (Ctrl-C or SIGTERM); the stage running then is not counted"
            )
        return capacity_block(self, self.costs, self.seed, self.method)

    def curve_order(self, stages: Sequence[StageSummary]) -> list[StageSummary]:
        """The stages ran in search order; the curve reads them in order of offered rate."""
        return sorted(stages, key=lambda st: st["load"]["rate"] or 0.0)


def capacity_block(plan: CapacityPlan, costs: CostInputs | None, seed: int, method: str) -> Capacity:
    """The capacity block (capacity.json and summary.capacity) of a finished search."""
    s = plan.search
    lo, _ = s.bracket()
    ci_lo, ci_hi, crossing = interval(s.observed, s.target, seed=seed)
    at = [m for m in plan.measures if m.rate == lo and m.client_lag_p99_ms is None]

    def mean(key: str) -> float | None:
        vals = [getattr(m, key) for m in at if getattr(m, key) is not None]
        return float(np.mean(vals)) if vals else None

    good, n = s.pooled().get(lo, (0, 0)) if lo is not None else (0, 0)
    tokens = mean("output_tokens_per_s")
    usd = per_million(costs.gpu_hour_cost * costs.gpu_count, tokens) if costs is not None else None
    block = {
        "capacity_rps": lo,
        "capacity_level_rps": lo,
        "ci95": [ci_lo, ci_hi],
        "crossing_rps": crossing,
        "attainment": s.target,
        "attainment_at_capacity": good / n if n else None,
        "slos": dict(plan.slos),
        "goodput_rps": mean("goodput_rps"),
        "output_tokens_per_s": tokens,
        "usd_per_million_output_tokens": usd,
        "gpu_hour_cost_usd": None if costs is None else costs.gpu_hour_cost,
        "gpu_count": None if costs is None else costs.gpu_count,
        "stages": [
            {
                "stage": m.stage,
                "rate": m.rate,
                "offered_rps": m.flags.size / m.window_s if m.window_s else None,
                "attainment": m.attainment,
                "passed": plan.passed(m),
                "requests": int(m.flags.size),
                "throughput_rps": m.throughput_rps,
                "ttft_p99_ms": m.ttft_p99_ms,
                "tpot_p99_ms": m.tpot_p99_ms,
                "error_rate": m.error_rate,
                "counted": m.client_lag_p99_ms is None,
                "saturation": m.saturation,
            }
            for m in plan.measures
        ],
        "stopped_because": s.stopped_because,
        "elapsed_s": round(plan.spent_s, 1),
        "budget_s": plan.budget_s,
        "method": method,
    }
    return cast(Capacity, block)
