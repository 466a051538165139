"""Capacity: the highest request rate at which the fraction of requests meeting every per-request
SLO is at least A (DistServe's goodput definition), found by a search over short open-loop stages.

A per-request SLO (``ttft_ms``, ``tpot_ms``, ``e2e_ms``) is a bound every request must meet; a
request is good when it finished ok within all of them (analysis/sla.py ``good_mask``). A stage's
attainment is good / (ok + failed) over its measured requests (as ``goodput.attained_fraction``);
it passes when that is >= A. Each stage is Poisson at its rate for ``warmup_s + stage_s`` from an
idle server (the last stage has drained); requests of the first ``warmup_s`` are warm-up, and
the warm-up grows to 2x the mean end-to-end latency measured at passing stages (a batch takes
that long to fill: long answers need long warm-ups).

The search (``Search``; ``CapacityPlan`` runs it as a StagePlan):
  1. bracket: from a low start rate, double while stages pass (halve while they fail);
  2. bisect: the geometric mean of the highest passing rate (lo) and the lowest failing one
     (hi), until hi / lo - 1 <= the relative precision (5 %);
  3. re-measure lo and hi once more; a rate's attainment pools all its stages, and the search
     goes on if the boundary moved.
It stops, saying why, on a stage budget, at ``max_rate``, when the client is the bottleneck (p99
send lag t_send - t_sched > 10 ms: the rate was not offered, the stage is not counted) or when
the server errors (error rate > 5 %). A short stage sees a transient: where the SLO binds only
close to saturation queues build slowly, and requests sent in a stage's last end-to-end latency
finish as it drains; both read high, so a stage should last many end-to-end latencies.

The 95 % interval, a bootstrap over the stages' requests: each resample redraws every stage's
good flags with replacement, in moving blocks of consecutive requests as long as the stage's
mean number in flight (overlapping requests share the server's state: drawn one by one they
would understate the noise), pools them per rate and applies the search's rule: U = the lowest
failing rate, L = the highest passing one below it, the crossing interpolated linearly in
attainment between them. The interval is [2.5th percentile of L, 97.5th of U], not percentiles
of the crossing: interpolation assumes attainment is linear between two measured rates, and a
cliff between them pins every crossing to one end, far narrower than the data support. Where
the crossing lies between neighbouring measured rates is unknown, so the interval spans them;
that span also carries the stage-to-stage noise resampling cannot see (on the simulator near
capacity, flags resampled gave a stage sd of 0.036, repeated stages 0.054). Rates in the
result are offered rates: a level's measured requests over its stages' windows (a Poisson
count strays by 1/sqrt(n), 4 % at 700 requests). ``capacity_rps`` is that of the highest
passing level, ``crossing_rps`` the median interpolated crossing. Same profile and seed: the
same arrival schedules and the same resamples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson

from loadgen.analysis import metrics
from loadgen.analysis import sla as sla_mod
from loadgen.analysis.cost import CostInputs, cost_inputs, per_million
from loadgen.analysis.curve import curve
from loadgen.config import LoadConfig, Profile
from loadgen.config.stages import Stage
from loadgen.errors import LoadgenError
from loadgen.records import CANCELLED
from loadgen.result import write_summary
from loadgen.runner import api
from loadgen.runner.plan import StageOutcome

CAPACITY = "capacity.json"
CLIENT_LAG_LIMIT_MS = 10.0
ERROR_RATE_LIMIT = 0.05
RESAMPLES = 2000
METHOD = (
    "double from {start:g} req/s until a stage fails, bisect to {precision:.0%}, re-measure both ends; "
    "stages Poisson, {warmup:g} s warm-up (or 2x mean E2E) + {stage:g} s, from idle; capacity = highest "
    "rate with pooled attainment >= {target:g}, at the rate it offered; 95% CI = [p2.5 highest passing, "
    f"p97.5 lowest failing offered rate] over {RESAMPLES} moving-block bootstrap resamples of good flags"
)


class CapacityError(LoadgenError, ValueError):
    """A capacity search that cannot start: no SLO, a bad attainment, duration or rate."""


@dataclass(frozen=True)
class Observation:
    """A counted stage: its rate level, its good flags in send order, its bootstrap block (its
    mean number of requests in flight) and the seconds its measured requests were sent over
    (None: the level is taken as the rate offered)."""

    rate: float
    flags: np.ndarray
    block: int = 1
    window_s: float | None = None


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
    mm = s["metrics"]
    return StageMeasure(
        float(stage.rate or 0.0), good[counted], max(1, round(mm["mean_concurrency"] or 1)), window,
        stage.index, s["counts"]["error_rate"], mm["request_throughput_rps"],
        mm["goodput"]["requests_per_s"], mm["output_tokens_per_s"], mm["ttft_ms"]["p99"],
        mm["tpot_ms"]["p99"], None if lag is None else lag["client_lag_p99_ms"], mm["e2e_ms"]["mean"],
    )  # fmt: skip


class Search:
    """Bracket, bisect, re-measure (see the module's doc): which rate level to measure next."""

    def __init__(
        self,
        start: float,
        target: float,
        *,
        precision: float = 0.05,
        max_stages: int = 14,
        max_rate: float | None = None,
    ) -> None:
        self.start, self.target, self.precision, self.max_stages = start, target, precision, max_stages
        self.max_rate = max_rate if max_rate is not None else 1e5
        self.min_rate = start / 64
        self.observed: list[Observation] = []
        self.stopped_because: str | None = None
        self.done = False

    def observe(self, obs: Observation) -> None:
        self.observed.append(obs)

    def pooled(self) -> dict[float, tuple[int, int]]:
        """level -> (good, counted) over every stage at that level."""
        out: dict[float, tuple[int, int]] = {}
        for o in self.observed:
            g, n = out.get(o.rate, (0, 0))
            out[o.rate] = (g + int(o.flags.sum()), n + int(o.flags.size))
        return out

    def bracket(self) -> tuple[float | None, float | None]:
        """(highest passing level below the lowest failing one, lowest failing level)."""
        return bracket({r: g / n for r, (g, n) in self.pooled().items() if n}, self.target)

    def next_rate(self) -> float | None:
        """The level to measure next, or None when the search is over (``stopped_because`` says
        why when it did not end on its own rules)."""
        if self.done or self.stopped_because:
            return None
        if not self.observed:
            return self.start
        lo, hi = self.bracket()
        runs = [o.rate for o in self.observed]
        rate: float | None
        why = ""
        if hi is None:
            rate = None if lo is None or lo >= self.max_rate else min(2 * lo, self.max_rate)
            why = f"every rate up to {self.max_rate:g} req/s (--max-rate) met the SLOs: capacity is >= that"
        elif lo is None:
            rate = None if hi <= self.min_rate else max(hi / 2, self.min_rate)
            why = f"no rate down to {hi:g} req/s met the SLOs"
        elif hi / lo - 1 > self.precision:
            rate = float(f"{math.sqrt(lo * hi):.4g}")  # readable names, far finer than the precision
        else:  # converged: measure each end twice
            rate = lo if runs.count(lo) < 2 else hi if runs.count(hi) < 2 else None
            self.done = rate is None
        if rate is not None and len(self.observed) >= self.max_stages:
            gap = "" if lo is None or hi is None else f"; the bracket is {lo:g}-{hi:g} req/s"
            self.stopped_because = f"stage budget of {self.max_stages} stages reached{gap}"
            return None
        if rate is None and why:
            self.stopped_because = why
        return rate


def bracket(attainment: dict[float, float], target: float) -> tuple[float | None, float | None]:
    """The search's rule on attainment by level: (highest level below the lowest failing one
    that passes, lowest failing level); a pass above a failure is not trusted."""
    fails = [r for r, a in attainment.items() if a < target]
    hi = min(fails) if fails else None
    passes = [r for r, a in attainment.items() if a >= target and (hi is None or r < hi)]
    return (max(passes) if passes else None), hi


def offered(observed: Sequence[Observation]) -> dict[float, float]:
    """level -> the rate its stages offered: their measured requests over their windows."""
    out: dict[float, float] = {}
    for level in {o.rate for o in observed}:
        at = [o for o in observed if o.rate == level]
        seconds = sum(o.window_s or 0.0 for o in at)
        known = all(o.window_s for o in at) and seconds > 0
        out[level] = sum(o.flags.size for o in at) / seconds if known else level
    return out


def interval(
    observed: Sequence[Observation], target: float, *, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float | None, float | None, float | None]:
    """(CI low, CI high, median interpolated crossing) in offered req/s, by the bootstrap of the
    module's doc. None for a bound the data cannot give (no passing rate: low; no failing: high)."""
    rng = np.random.default_rng([seed, 7])
    levels = sorted({o.rate for o in observed if o.flags.size})
    if not levels:
        return None, None, None
    x = offered(observed)
    good, n = np.zeros((resamples, len(levels))), np.zeros(len(levels))
    for o in observed:
        if o.flags.size:
            good[:, levels.index(o.rate)] += resample_goods(o.flags, o.block, resamples, rng)
            n[levels.index(o.rate)] += o.flags.size
    att = good / n
    lows, highs, cross = np.zeros(resamples), np.full(resamples, np.inf), np.full(resamples, np.nan)
    for b in range(resamples):
        by_level = dict(zip(levels, att[b].tolist()))
        lo, hi = bracket(by_level, target)
        lows[b], highs[b] = (0.0 if lo is None else x[lo]), (math.inf if hi is None else x[hi])
        if lo is not None and hi is not None:
            share = (by_level[lo] - target) / (by_level[lo] - by_level[hi])
            cross[b] = x[lo] + share * (x[hi] - x[lo])
    low, high = np.percentile(lows, 2.5, method="lower"), np.percentile(highs, 97.5, method="higher")
    valid = cross[~np.isnan(cross)]
    return (
        float(low) if low > 0 else None,
        float(high) if math.isfinite(high) else None,
        float(np.median(valid)) if valid.size else None,
    )


def resample_goods(flags: np.ndarray, block: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Good counts of ``resamples`` moving-block bootstrap draws of ``flags`` (blocks of
    ``block`` consecutive requests, scaled to the stage's request count); block 1 is the plain
    bootstrap, drawn as a binomial."""
    n = flags.size
    size = min(max(1, block), n)
    if size <= 1:
        return rng.binomial(n, flags.mean() if n else 0.0, size=resamples).astype(float)
    sums = np.convolve(flags.astype(float), np.ones(size), "valid")
    k = -(-n // size)
    return sums[rng.integers(0, sums.size, size=(resamples, k))].sum(axis=1) * n / (k * size)


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
        min_requests: int = 20,
        on_stage: Callable[[StageMeasure, bool], None] | None = None,
    ) -> None:
        self.search, self.slos = search, slos
        self.stage_s, self.warmup_s, self.min_requests = stage_s, warmup_s, min_requests
        self.on_stage = on_stage
        self.measures: list[StageMeasure] = []

    def next_stage(self, done: Sequence[StageOutcome]) -> Stage | None:
        for o in done[len(self.measures) :]:
            self.add(measure(o, self.slos))
        rate = self.search.next_rate()
        if rate is None:
            return None
        measured_s = max(self.stage_s, self.min_requests / rate)
        e2e_ms = max((m.e2e_mean_ms or 0.0 for m in self.measures if self.passed(m)), default=0.0)
        warm = max(self.warmup_s, round(2 * e2e_ms / 1e3, 1))
        return Stage(
            len(done), f"rate={rate:g}", None, rate, "poisson", 1.0, None,
            warm + measured_s, None, 0.0, round(rate * warm),
        )  # fmt: skip

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
        return m.attainment is not None and m.attainment >= self.search.target

    def result(self, costs: CostInputs | None, seed: int, method: str) -> dict[str, Any]:
        """The capacity block (capacity.json and summary.capacity)."""
        s = self.search
        lo, _ = s.bracket()
        ci_lo, ci_hi, crossing = interval(s.observed, s.target, seed=seed)
        at = [m for m in self.measures if m.rate == lo and m.client_lag_p99_ms is None]

        def mean(key: str) -> float | None:
            vals = [getattr(m, key) for m in at if getattr(m, key) is not None]
            return float(np.mean(vals)) if vals else None

        good, n = s.pooled().get(lo, (0, 0)) if lo is not None else (0, 0)
        tokens = mean("output_tokens_per_s")
        usd = per_million(costs.gpu_hour_cost * costs.gpu_count, tokens) if costs is not None else None
        return {
            "capacity_rps": None if lo is None else offered(s.observed)[lo],
            "capacity_level_rps": lo,
            "ci95": [ci_lo, ci_hi],
            "crossing_rps": crossing,
            "attainment": s.target,
            "attainment_at_capacity": good / n if n else None,
            "slos": dict(self.slos),
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
                    "passed": self.passed(m),
                    "requests": int(m.flags.size),
                    "throughput_rps": m.throughput_rps,
                    "ttft_p99_ms": m.ttft_p99_ms,
                    "tpot_p99_ms": m.tpot_p99_ms,
                    "error_rate": m.error_rate,
                    "counted": m.client_lag_p99_ms is None,
                }
                for m in self.measures
            ],
            "stopped_because": s.stopped_because,
            "method": method,
        }


@dataclass(slots=True)
class CapacityRun:
    run_dir: Path
    summary: dict[str, Any]  # summary.json, its "capacity" included
    capacity: dict[str, Any]  # capacity.json


def capacity_profile(profile: Profile, start_rate: float, slos: dict[str, float] | None) -> Profile:
    """``profile`` as the search runs it: open loop at ``start_rate`` with no in-flight cap (so
    the connection pool never queues), its SLOs replaced by ``slos`` when given."""
    update: dict[str, Any] = {"load": LoadConfig(rate=start_rate)}
    if slos is not None:
        update["sla"] = profile.sla.model_copy(update={k: slos.get(k) for k in sla_mod.SLO_FIELDS})
    w = profile.workload
    if w.num_requests is None and w.duration_s is None:  # a sweep's profile: its stages had lengths
        update["workload"] = w.model_copy(update={"duration_s": 60.0})
    return profile.model_copy(update=update)


async def run_capacity(
    profile: Profile,
    *,
    attainment: float,
    slos: dict[str, float] | None = None,
    start_rate: float | None = None,
    stage_s: float = 15.0,
    warmup_s: float = 5.0,
    precision: float = 0.05,
    max_stages: int = 14,
    max_rate: float | None = None,
    gpu_hour_cost: float | None = None,
    gpu_count: float | None = None,
    api_key: str | None = None,
    stop: Any = None,
    on_status: Callable[[str], None] | None = None,
    on_stage: Callable[[StageMeasure, bool], None] | None = None,
) -> CapacityRun:
    """Search the capacity of ``profile``'s target (or its simulator) as one run: every stage's
    records in requests.jsonl, stages and curve in summary.json, the result in capacity.json and
    ``summary["capacity"]``. ``slos`` (default: the profile's sla.ttft_ms/tpot_ms/e2e_ms)."""
    start = start_rate or profile.load.rate or 1.0
    prof = capacity_profile(profile, start, slos)
    chosen = sla_mod.set_slos(prof.sla)
    checks = [
        (bool(chosen), "no per-request SLO: give --sla 'ttft_ms<700' or set sla.ttft_ms/tpot_ms/e2e_ms"),
        (0 < attainment <= 1, f"--attainment {attainment:g}: a fraction in (0, 1], e.g. 0.99"),
        (stage_s > 0 and warmup_s >= 0, "--stage-duration must be > 0 and --stage-warmup >= 0"),
        (0 < precision < 1, f"precision {precision:g}: a fraction in (0, 1), e.g. 0.05"),
        (max_stages >= 2, f"--max-stages {max_stages}: at least 2"),
        (0 < start <= 1e6, f"start rate {start:g}: in (0, 1e6] req/s"),
        (max_rate is None or max_rate >= start, f"--max-rate {max_rate}: at least the start rate {start:g}"),
    ]
    for ok, msg in checks:
        if not ok:
            raise CapacityError(msg)
    costs = cost_inputs(dict(prof.labels), gpu_hour_cost=gpu_hour_cost, gpu_count=gpu_count)
    search = Search(start, attainment, precision=precision, max_stages=max_stages, max_rate=max_rate)
    plan = CapacityPlan(search, chosen, stage_s=stage_s, warmup_s=warmup_s, on_stage=on_stage)
    res = await api.run_async(prof, api_key=api_key, stop=stop, on_status=on_status, plan=plan)
    summary = res.summary
    if summary.get("interrupted"):
        search.stopped_because = "interrupted (Ctrl-C or SIGTERM); the stage running then is not counted"
    method = METHOD.format(
        start=start, precision=precision, warmup=warmup_s, stage=stage_s, target=attainment
    )
    cap = plan.result(costs, prof.workload.seed, method)
    summary["capacity"] = cap
    if summary.get("stages"):
        # The stages ran in search order; the curve reads them in order of offered rate.
        summary["curve"] = curve(sorted(summary["stages"], key=lambda st: st["load"]["rate"] or 0.0))
    (res.run_dir / CAPACITY).write_bytes(orjson.dumps(cap, option=orjson.OPT_INDENT_2))
    write_summary(res.run_dir, summary)
    return CapacityRun(res.run_dir, summary, cap)
