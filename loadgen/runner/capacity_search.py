"""The capacity search's pure part (``capacity.py`` runs it, and its docstring is the method):
which rate level to measure next (``Search``: bracket, bisect, re-measure), the rule that reads
a bracket off attainment by level, and the bootstrap interval of
the capacity over the stages' good flags. Numbers in, numbers out: no run, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000


@dataclass(frozen=True)
class Observation:
    """A counted stage: its rate level, its good flags in send order, its bootstrap block (in
    requests), the seconds its measured requests were sent over (for the rate it offered, which
    its table row shows), whether it was over-saturated, and whether it was a screen."""

    rate: float
    flags: np.ndarray
    block: int = 1
    window_s: float | None = None
    # The stage's queue grew while it ran (analysis/saturation.py): its level fails, whatever its
    # attainment, since a longer stage at that rate would miss the SLOs.
    over_saturated: bool = False
    # A short stage of the bracketing phase: its pass is only a screen (a stage from idle that
    # ends before its queue builds can pass past the cliff), so its level is measured again at
    # full length before the search bisects from it.
    screening: bool = False
    # Every SLO metric's p99 was under half its bound: the server is far from the boundary, and
    # the bracketing quadruples the rate instead of doubling it.
    far: bool = False


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
        return _pool(self.observed)

    def bracket(self) -> tuple[float | None, float | None]:
        """(highest passing level below the lowest failing one, lowest failing level); a level
        with an over-saturated stage fails."""
        return bracket(attainment_by_level(self.observed), self.target)

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
            step = 4 if any(o.far for o in self.observed if o.rate == lo) else 2
            rate = None if lo is None or lo >= self.max_rate else min(step * lo, self.max_rate)
            why = f"every rate up to {self.max_rate:g} req/s (--max-rate) met the SLOs: capacity is >= that"
        elif lo is None:
            rate = None if hi <= self.min_rate else max(hi / 2, self.min_rate)
            why = f"no rate down to {hi:g} req/s met the SLOs"
        elif hi / lo - 1 > self.precision:
            screened = all(o.screening for o in self.observed if o.rate == lo)
            # readable names, far finer than the precision
            rate = lo if screened else float(f"{math.sqrt(lo * hi):.4g}")
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


def passing_below(observed: Sequence[Observation], target: float) -> float | None:
    """The highest passing level below the search's highest passing one (``bracket``), or None.

    Why the interval reaches down to it: near a cliff a stage fails when its schedule holds a
    burst of arrivals, and a stage that held none passes with no failure at all, which no
    resampling of its requests can turn into a fail (on the simulator a 3-minute stage 3 % past
    the cliff passed 40 % of the time). So the highest pass may be luck, and the interval's low end
    is the next level that passed too; with two false passes in a row it still misses."""
    pooled = attainment_by_level(observed)
    lo, _ = bracket(pooled, target)
    below = [r for r, a in pooled.items() if lo is not None and r < lo and a >= target]
    return max(below) if below else None


def attainment_by_level(observed: Sequence[Observation]) -> dict[float, float]:
    """level -> attainment pooled over its stages, 0 where a stage was over-saturated."""
    over = saturated_levels(observed)
    return {r: 0.0 if r in over else g / n for r, (g, n) in _pool(observed).items() if n}


def _pool(observed: Sequence[Observation]) -> dict[float, tuple[int, int]]:
    """level -> (good, counted) over every stage at that level."""
    out: dict[float, tuple[int, int]] = {}
    for o in observed:
        g, n = out.get(o.rate, (0, 0))
        out[o.rate] = (g + int(o.flags.sum()), n + int(o.flags.size))
    return out


def saturated_levels(observed: Sequence[Observation]) -> set[float]:
    """The levels at which some stage was over-saturated: they fail whatever their attainment."""
    return {o.rate for o in observed if o.over_saturated}


def interval(
    observed: Sequence[Observation], target: float, *, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float | None, float | None, float | None]:
    """(CI low, CI high, median interpolated crossing) in req/s, by the bootstrap of the
    module's doc. None for a bound the data cannot give (no passing rate: low; no failing: high)."""
    rng = np.random.default_rng([seed, 7])
    levels = sorted({o.rate for o in observed if o.flags.size})
    if not levels:
        return None, None, None
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
        lows[b], highs[b] = (0.0 if lo is None else lo), (math.inf if hi is None else hi)
        if lo is not None and hi is not None:
            share = (by_level[lo] - target) / (by_level[lo] - by_level[hi])
            cross[b] = lo + share * (hi - lo)
    low = float(np.percentile(lows, 2.5, method="lower"))
    high = float(np.percentile(highs, 97.5, method="higher"))
    below = passing_below(observed, target)
    if below is not None:  # the highest pass may have been luck: the interval reaches the next one
        low = min(low, below)
    valid = cross[~np.isnan(cross)]
    return (
        float(low) if low > 0 else None,
        float(high) if math.isfinite(high) else None,
        float(np.median(valid)) if valid.size else None,
    )


def resample_goods(flags: np.ndarray, block: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Good counts of ``resamples`` circular-block bootstrap draws of ``flags`` (blocks of
    ``block`` consecutive requests, the stage read as a circle so that its last requests, where a
    queue that built up fails them, are drawn as often as any; scaled to the stage's request
    count); block 1 is the plain bootstrap, drawn as a binomial."""
    n = flags.size
    size = min(max(1, block), n)
    if size <= 1:
        return rng.binomial(n, flags.mean() if n else 0.0, size=resamples).astype(float)
    wrapped = np.concatenate((flags, flags[: size - 1])).astype(float)  # circular: no edge left out
    sums = np.convolve(wrapped, np.ones(size), "valid")
    k = -(-n // size)
    return sums[rng.integers(0, sums.size, size=(resamples, k))].sum(axis=1) * n / (k * size)
