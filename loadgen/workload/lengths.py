"""Token-length sampling from a profile's LengthDist, and the statistics of what was drawn."""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.config import LengthDist
from loadgen.config.lengths import MAX_TOKENS
from loadgen.summary import LengthStats


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n`` lengths (int64, all >= 1, clipped to the distribution's min/max)."""
    if dist.kind == "fixed":
        return np.full(n, dist.value, dtype=np.int64)
    if dist.kind == "uniform":
        return rng.integers(dist.min, dist.max, size=n, endpoint=True, dtype=np.int64)
    if dist.kind == "empirical":
        return rng.choice(np.asarray(dist.data, dtype=np.int64), size=n, replace=True)
    if dist.kind == "normal":
        raw = rng.normal(dist.mean, dist.std, size=n)
    elif dist.kind == "lognormal":
        # The profile gives the mean in tokens; E[lognormal] = exp(mu + sigma^2 / 2).
        mu = np.log(dist.mean) - dist.sigma**2 / 2
        raw = rng.lognormal(mu, dist.sigma, size=n)
    else:
        raise ValueError(f"unknown length distribution kind {dist.kind!r}")
    upper = dist.max if dist.max is not None else MAX_TOKENS
    return np.clip(np.nan_to_num(np.rint(raw), nan=dist.min, posinf=upper), dist.min, upper).astype(np.int64)


def describe(values: Any) -> LengthStats:
    """count, mean, std, min, p50, p90, p99, max of ``values`` (None for an empty input)."""
    arr = np.asarray(values, dtype=np.float64).ravel()
    if arr.size == 0:
        return {
            "count": 0,
            "mean": None,
            "std": None,
            "min": None,
            "p50": None,
            "p90": None,
            "p99": None,
            "max": None,
        }
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "std": float(arr.std()),
        "min": float(arr.min()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(arr.max()),
    }
