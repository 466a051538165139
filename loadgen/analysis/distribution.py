"""One distribution's summary statistics (``metric_defs.STATS``), as every block of the summary
holds them: the latencies, the fidelity lags, TTFT by turn.

Kept apart from ``analysis.metrics`` (which re-exports ``distribution``) so the statistics of a
list of numbers read on their own, and so the summary's module stays about records.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from loadgen.analysis.gaps import SMALL, GapSamples, stream_stats
from loadgen.metric_defs import PERCENTILES, STATS

__all__ = ["distribution"]


def distribution(values: Any) -> dict:
    """Summary statistics of ``values`` as a JSON-ready dict with the keys of ``STATS``.

    NaN values are dropped first (a column's "undefined for this request"). Percentiles use
    numpy's default linear interpolation between closest ranks (``np.percentile(...,
    method="linear")``: p50 of 1..100 is 50.5, p99 is 99.01); ``std`` is the population
    standard deviation (ddof=0). No values: ``count`` 0 and ``None`` for every other stat.
    ``values`` may be ``GapSamples``: past ``gaps.SMALL`` of them they are summarized in
    passes over blocks (same percentiles; mean and std to the last bits), never materialised.
    An array makes one private copy (percentiles partition it in place), never several.
    """
    if isinstance(values, GapSamples) and values.size > SMALL:
        s = stream_stats(values, list(PERCENTILES.values()))
        out = {"count": s["count"], **{k: _float(s[k]) for k in ("mean", "std", "min")}}
        out.update({k: _float(v) for k, v in zip(PERCENTILES, s["percentiles"])})
        out["max"] = _float(s["max"])
        return out
    arr = np.asarray(values, dtype=np.float64).ravel()
    nan = np.isnan(arr)
    arr = arr[~nan] if nan.any() else arr.copy()
    del nan
    if arr.size == 0:
        return {"count": 0, **{k: None for k in STATS[1:]}}
    mean = arr.mean()
    out = {
        "count": int(arr.size),
        "mean": _float(mean),
        "std": _float(arr.std() if arr.size <= SMALL else _blocked_std(arr, float(mean))),
        "min": _float(arr.min()),
    }
    pct = np.percentile(arr, list(PERCENTILES.values()), method="linear", overwrite_input=True)
    out.update({k: _float(v) for k, v in zip(PERCENTILES, pct)})
    out["max"] = _float(arr.max())
    return out


def _blocked_std(arr: np.ndarray, mean: float) -> float:
    """Population std of a long array, a block at a time (``arr.std()`` makes two full copies)."""
    step = 1 << 20
    parts = []
    for i in range(0, arr.size, step):
        d = arr[i : i + step] - mean
        parts.append(float(d @ d))
    return math.sqrt(math.fsum(parts) / arr.size)


def _float(x: Any) -> float | None:
    x = float(x)
    return None if np.isnan(x) or np.isinf(x) else x
