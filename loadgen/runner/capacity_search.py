"""The capacity search's pure part (``capacity.py`` runs it, and its docstring is the method):
which rate level to measure next (``Search``: bracket, bisect, re-measure), the rule that reads
a bracket off attainment by level, the rates the levels offered, and the bootstrap interval of
the capacity over the stages' good flags. Numbers in, numbers out: no run, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000


@dataclass(frozen=True)
class Observation:
    """A counted stage: its rate level, its good flags in send order, its bootstrap block (its
    mean number of requests in flight), the seconds its measured requests were sent over
    (None: the level is taken as the rate offered), and whether it was over-saturated."""

    rate: float
    flags: np.ndarray
    block: int = 1
    window_s: float | None = None
    # The stage's queue grew while it ran (analysis/saturation.py): its level fails, whatever its
    # attainment, since a longer stage at that rate would miss the SLOs.
    over_saturated: bool = False


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
        """(highest passing level below the lowest failing one, lowest failing level); a level
        with an over-saturated stage fails."""
        over = saturated_levels(self.observed)
        pooled = {r: 0.0 if r in over else g / n for r, (g, n) in self.pooled().items() if n}
        return bracket(pooled, self.target)

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

    def stages_left(self) -> int:
        """The stages the search still expects: bisections of the bracket down to the precision,
        then the re-measures of both ends (at least one)."""
        lo, hi = self.bracket()
        if lo is None or hi is None:
            return 1
        ratio = math.log(hi / lo) / math.log1p(self.precision)
        runs = [o.rate for o in self.observed]
        bisect = math.ceil(math.log2(ratio)) if ratio > 1 else 0
        return max(1, bisect + max(0, 2 - runs.count(lo)) + max(0, 2 - runs.count(hi)))


def bracket(attainment: dict[float, float], target: float) -> tuple[float | None, float | None]:
    """The search's rule on attainment by level: (highest level below the lowest failing one
    that passes, lowest failing level); a pass above a failure is not trusted."""
    fails = [r for r, a in attainment.items() if a < target]
    hi = min(fails) if fails else None
    passes = [r for r, a in attainment.items() if a >= target and (hi is None or r < hi)]
    return (max(passes) if passes else None), hi


def saturated_levels(observed: Sequence[Observation]) -> set[float]:
    """The levels at which some stage was over-saturated: they fail whatever their attainment."""
    return {o.rate for o in observed if o.over_saturated}


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
    for level in saturated_levels(observed) & set(levels):
        att[:, levels.index(level)] = 0.0  # an over-saturated level fails in every resample
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
