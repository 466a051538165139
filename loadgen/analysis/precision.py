"""How precisely a stage knows a statistic: the 95 % confidence interval of a percentile or a mean
of its measured requests, and a running check of it while the stage goes on (``--until``).

The intervals: a percentile's is distribution-free, from the order statistics: of ``n`` sorted
values, the ``p`` quantile lies between the ``r_lo``-th and ``r_hi``-th with 95 % confidence,
``r = n p ∓ 1.96 √(n p (1 - p))`` (the binomial count of values below it, normal
approximation), rounded outward; with too few values for those ranks to exist there is no
interval yet. A mean's is ``1.96 s / √n``. Either needs 30 values at least. The estimate is the summary's own
(numpy's linear percentile, the arithmetic mean). Precision is the larger distance from the
estimate to an end of the interval, over the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from loadgen import metric_defs
from loadgen.config.until import Until, parse_until
from loadgen.summary.stages import PrecisionBlock

Z95 = 1.959963984540054
# Fewer values than this give no interval: the first dozen requests of a stage (the batch still
# filling) would otherwise end it on a lucky narrow interval that the next few widen.
MIN_SAMPLES = 30


class Interval(NamedTuple):
    estimate: float
    low: float
    high: float
    samples: int

    @property
    def half_width(self) -> float:
        """The larger side of the interval over the estimate (inf for an estimate of 0)."""
        side = max(self.estimate - self.low, self.high - self.estimate)
        return side / abs(self.estimate) if self.estimate else math.inf


def interval(values: Any, stat: str) -> Interval | None:
    """The 95 % interval of ``stat`` (a percentile name of the registry, or ``mean``) of
    ``values`` (NaN dropped); None while there are too few values for one."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[~np.isnan(x)]
    n = x.size
    if n < MIN_SAMPLES:
        return None
    if stat == "mean":
        m, half = float(x.mean()), Z95 * float(x.std(ddof=1)) / math.sqrt(n)
        return Interval(m, m - half, m + half, n)
    p = metric_defs.PERCENTILES[stat] / 100
    spread = Z95 * math.sqrt(n * p * (1 - p))
    lo, hi = math.floor(n * p - spread), math.ceil(n * p + spread) + 1  # 1-based ranks
    if lo < 1 or hi > n:
        return None
    return Interval(float(np.percentile(x, p * 100)), float(x[lo - 1]), float(x[hi - 1]), n)


class Precision:
    """``--until`` while a stage runs: each measured request's value of the metric as it
    finishes; ``reached`` once the interval is within the half-width. The interval is checked
    each time the values have grown by a twentieth (8 values at least), so a long stage checks a
    few dozen times, not once per request."""

    def __init__(self, until: Until, value: Callable[[Any], float]) -> None:
        self.until, self._value = until, value
        self.values: list[float] = []
        self.reached = False
        self.last: Interval | None = None
        self._next_check = MIN_SAMPLES  # no interval before that many values

    def add(self, record: Any) -> None:
        v = self._value(record)
        if math.isnan(v):
            return
        self.values.append(v)
        if len(self.values) >= self._next_check and not self.reached:
            self._next_check = len(self.values) + max(8, len(self.values) // 20)
            self.last = interval(self.values, self.until.stat)
            self.reached = self.last is not None and self.last.half_width <= self.until.half_width


class _OneRecord:
    """One finished record as the registry's formulas read columns (``metric_defs.Columns``):
    each field a one-element array, ``t_last_chunk_ns`` from its chunk times as the table makes it."""

    def __init__(self, rec: Any) -> None:
        self._rec = rec

    def _get(self, name: str) -> Any:
        if name == "t_last_chunk_ns":
            times = self._rec.chunk_times_ns
            return times[-1] if times else None
        return getattr(self._rec, name)

    def column(self, name: str) -> np.ndarray:
        v = self._get(name)
        return np.array([0 if v is None else v], dtype=np.int64)

    def present(self, name: str) -> np.ndarray:
        return np.array([self._get(name) is not None])


def record_value(metric: str) -> Callable[[Any], float]:
    """The value (ms, NaN where undefined) of a per-request ``metric`` for one finished record,
    by the registry's own formula: what ``--until`` collects as the stage goes."""
    formula = metric_defs.get(metric).formula
    if formula is None:
        raise ValueError(f"{metric} is not a per-request latency")

    def value(rec: Any) -> float:
        return float(formula(_OneRecord(rec))[0])

    return value


def precision_block(table: Any, text: str, precise: bool, at_stop: Interval | None) -> PrecisionBlock:
    """What a stage (or a one-stage run) reached of ``load.until`` (``text``): the interval of
    the statistic over its measured ok requests, whether the precision ended it, and the interval
    the check saw when it did (``at_stop``: the requests still in flight then finish after it)."""
    until = parse_until(text)
    formula = metric_defs.get(until.metric).formula
    assert formula is not None  # parse_until accepts per-request metrics only
    pick = table.column("ok") & ~table.column("warmup")
    found = interval(formula(table)[pick], until.stat)
    return {
        "until": until.text(),
        "target_half_width": until.half_width,
        "reached": precise,
        "estimate": None if found is None else found.estimate,
        "low": None if found is None else found.low,
        "high": None if found is None else found.high,
        "half_width": None if found is None or math.isinf(found.half_width) else found.half_width,
        "samples": int(pick.sum()),
        "half_width_at_stop": at_stop.half_width if precise and at_stop is not None else None,
        "samples_at_stop": at_stop.samples if precise and at_stop is not None else None,
    }
