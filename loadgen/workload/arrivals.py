"""Open-loop arrival schedules: absolute send offsets (int ns from run start), computed up front.

Absolute offsets, not relative sleeps: the driver sleeps until each deadline, so one late send
does not push every later one back (that drift hides server slowness behind a lower real rate).
"""

from __future__ import annotations

from typing import get_args

import numpy as np

from loadgen.config.base import Arrival

ARRIVALS: tuple[str, ...] = get_args(Arrival)
_CHUNK = 4096


def _rng(seed: int) -> np.random.Generator:
    # Stream 1 of the seed is reserved for arrivals, so changing lengths never moves a send time.
    return np.random.default_rng([seed, 1])


def _gaps_s(rng: np.random.Generator, n: int, rate: float, arrival: str, burstiness: float) -> np.ndarray:
    if arrival == "constant":
        return np.full(n, 1.0 / rate)
    if arrival == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    if arrival == "gamma":
        # shape k, scale 1/(rate k): mean 1/rate, coefficient of variation 1/sqrt(k).
        return rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    raise ValueError(f"unknown arrival {arrival!r}; valid: {', '.join(ARRIVALS)}")


def _check(rate: float, arrival: str, burstiness: float) -> None:
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival {arrival!r}; valid: {', '.join(ARRIVALS)}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")


def arrival_offsets_ns(
    n: int, rate: float, arrival: str = "poisson", burstiness: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Send offsets of ``n`` requests: the first at 0, then cumulative gaps of mean 1/rate."""
    _check(rate, arrival, burstiness)
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if arrival == "constant":
        # i / rate directly, not a cumulative sum, so rounding never accumulates.
        return np.rint(np.arange(n) * (1e9 / rate)).astype(np.int64)
    gaps = _gaps_s(_rng(seed), n - 1, rate, arrival, burstiness)
    return np.rint(np.concatenate(([0.0], np.cumsum(gaps))) * 1e9).astype(np.int64)


def offsets_until(
    duration_s: float, rate: float, arrival: str = "poisson", burstiness: float = 1.0, seed: int = 0
) -> np.ndarray:
    """All send offsets before ``duration_s``; a prefix of ``arrival_offsets_ns`` for the seed."""
    _check(rate, arrival, burstiness)
    limit_ns = duration_s * 1e9
    if arrival == "constant":
        n = int(np.ceil(duration_s * rate)) + 1
        offs = arrival_offsets_ns(n, rate, arrival, burstiness, seed)
        return offs[offs < limit_ns]
    rng = _rng(seed)
    parts, t = [np.zeros(1)], 0.0
    while t * 1e9 < limit_ns:
        # Same generator, drawn in chunks: identical values to one big draw of the same length.
        cum = t + np.cumsum(_gaps_s(rng, _CHUNK, rate, arrival, burstiness))
        parts.append(cum)
        t = float(cum[-1])
    offs = np.rint(np.concatenate(parts) * 1e9).astype(np.int64)
    return offs[offs < limit_ns] if duration_s > 0 else offs[:0]
