"""Is a stage over-saturated? A verdict of its own, from what grows while the stage runs.

Why attainment alone misleads: a server offered more than it serves does not fail at once. Its
queue grows, and a stage that starts from idle and lasts T seconds only breaks a TTFT objective
once the backlog is that many seconds of work, so a short stage past the saturation cliff can
meet every SLO while it could never do so for long. What gives it away is a trend: the requests
owed grow, and the time to first token grows with them. GuideLLM stops a run on the slopes of
TTFT and concurrency with a margin-of-error test; this is that test, on one stage's records.

The rule (docs/metrics.md, "Over-saturation"):

- The stage's dispatch window (its first to its last measured scheduled send, where the load is
  offered; the drain after the last send would read as a falling trend) is cut into ``B`` equal
  bins, ``B = min(12, measured // 5)``; with fewer than 6 bins (fewer than 30 measured requests)
  the verdict is ``undetermined``: too few requests to tell a trend from noise, and it never
  passes for stable.
- Three signals, one value per bin: ``outstanding``, the requests scheduled and not yet finished
  (the client's own count, warm-up requests still in flight included), time-averaged over the
  bin; ``ttft_ms``, the mean TTFT from the scheduled send of the ok requests scheduled in the bin;
  ``waiting``, the server's waiting-queue gauge averaged over the scrapes in the bin, where its
  /metrics has one.
- Each signal's trend is the least-squares slope of its bin values on the bin centres, with a
  95 % margin of error (Student's t, ``B - 2`` degrees of freedom). It *grows* when the slope less
  its margin is above zero and its growth over the window (slope x window) is material: at least
  ``max(2, 10 % of its mean)`` requests for outstanding and waiting, ``max(5 ms, 20 % of its
  mean)`` for TTFT.
- ``over_saturated`` when the server's waiting queue grows, or the requests outstanding and TTFT
  grow together (a closed loop's outstanding count is its concurrency, flat by construction: its
  latency alone never makes it over-saturated); else ``stable``. TTFT's floor is high because a
  stage that starts from idle fills its batch for an end-to-end latency or so, and the requests
  owed and TTFT rise a little while it does; a queue that is falling behind adds whole
  seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.analysis.counts import mean_concurrency
from loadgen.analysis.table import RecordTable
from loadgen.summary.stages import Saturation, Trend

MIN_BINS, MAX_BINS, PER_BIN = 6, 12, 5
# Two-sided 95 % critical values of Student's t by degrees of freedom (1..10); the bins give 4..10.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
# What counts as material growth over the window, per signal: (absolute floor, fraction of mean).
MATERIAL: dict[str, tuple[float, float]] = {
    "outstanding": (2.0, 0.10),
    "ttft_ms": (100.0, 0.50),
    "waiting": (2.0, 0.10),
}
# A verdict as the stage tables (report, console, capacity) name the stage's queue.
QUEUE_WORDS: dict[str, str] = {"stable": "stable", "over_saturated": "growing", "undetermined": "too few"}
RULE = (
    "over-saturated when the server's waiting queue grows, or the requests outstanding and TTFT "
    "(from the scheduled send) grow together: least-squares slope over 6-12 equal bins of the "
    "dispatch window, slope minus its 95% margin of error above zero, and growth over the window "
    "of at least max(2, 10% of the mean) requests or max(100 ms, 50% of the mean) of TTFT"
)


def assess(table: RecordTable, waiting: Sequence[tuple[int, float]] = ()) -> Saturation:
    """The verdict of one stage: ``table`` is its records (warm-up included: they are still owed
    while they run), ``waiting`` the server's waiting-queue scrapes as ``(t_ns, value)``."""
    measured = ~table.column("warmup")
    n = int(measured.sum())
    bins = min(MAX_BINS, n // PER_BIN)
    sched = table.column("t_sched_ns")[measured]
    window = (int(sched.min()), int(sched.max())) if n else (0, 0)
    if n and not (table.column("ok") & measured).any():
        # A queue of refusals answered at once says nothing of the server's queue.
        return {
            "verdict": "undetermined",
            "reason": "no measured request was ok",
            "bins": 0,
            "signals": {},
            "rule": RULE,
        }
    if bins < MIN_BINS or window[1] <= window[0]:
        return {
            "verdict": "undetermined",
            "reason": f"{n} measured requests: at least {MIN_BINS * PER_BIN} are needed to tell a trend "
            "from noise",
            "bins": 0,
            "signals": {},
            "rule": RULE,
        }
    edges = np.linspace(window[0], window[1], bins + 1)
    values = {"outstanding": _outstanding(table, edges), "ttft_ms": _ttft(table, edges)}
    if waiting:
        values["waiting"] = _gauge(waiting, edges)
    seconds = (window[1] - window[0]) / 1e9
    centres = (edges[:-1] + edges[1:]) / 2 / 1e9
    signals = {name: _trend(name, centres, v, seconds) for name, v in values.items()}
    grows = {name: s["grows"] for name, s in signals.items() if s is not None}
    over = grows.get("waiting", False) or (grows.get("outstanding", False) and grows.get("ttft_ms", False))
    growing = [name for name, g in grows.items() if g]
    return {
        "verdict": "over_saturated" if over else "stable",
        "reason": f"growing: {', '.join(growing)}" if growing else "nothing grows",
        "bins": bins,
        "signals": {name: s for name, s in signals.items() if s is not None},
        "rule": RULE,
    }


def _outstanding(table: RecordTable, edges: np.ndarray) -> np.ndarray:
    """Per bin, the time-averaged count of requests scheduled and not yet finished (a request
    that never finished is owed to the window's end)."""
    sched = table.column("t_sched_ns")
    end, has_end = table.ints("t_end_ns")
    finish = np.where(has_end, end, int(edges[-1]))
    return np.array([mean_concurrency(sched, finish, int(lo), int(hi)) for lo, hi in zip(edges, edges[1:])])


def _ttft(table: RecordTable, edges: np.ndarray) -> np.ndarray:
    """Per bin, the mean TTFT from the scheduled send of the ok measured requests scheduled in
    it (NaN for a bin without one)."""
    sched = table.column("t_sched_ns")
    first, has_first = table.ints("t_first_token_ns")
    pick = table.column("ok") & ~table.column("warmup") & has_first
    ttft = (first[pick] - sched[pick]) / 1e6
    return _binned_mean(sched[pick].astype(np.float64), ttft, edges)


def _gauge(samples: Sequence[tuple[int, float]], edges: np.ndarray) -> np.ndarray:
    t = np.array([s[0] for s in samples], dtype=np.float64)
    v = np.array([s[1] for s in samples], dtype=np.float64)
    return _binned_mean(t, v, edges)


def _binned_mean(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(edges, t, side="right") - 1
    inside = (idx >= 0) & (idx < len(edges) - 1)
    sums = np.bincount(idx[inside], weights=v[inside], minlength=len(edges) - 1)
    counts = np.bincount(idx[inside], minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _trend(name: str, x: np.ndarray, y: np.ndarray, seconds: float) -> Trend | None:
    """The least-squares slope of ``y`` on ``x`` (per second) with its 95 % margin of error, and
    whether it grows by the rule; None with fewer than ``MIN_BINS`` bins holding a value."""
    keep = ~np.isnan(y)
    x, y = x[keep], y[keep]
    if x.size < MIN_BINS:
        return None
    xc = x - x.mean()
    sxx = float(xc @ xc)
    slope = float(xc @ (y - y.mean()) / sxx)
    resid = y - y.mean() - slope * xc
    dof = x.size - 2
    se = float(np.sqrt(resid @ resid / dof / sxx))
    margin = _T95[min(dof, len(_T95)) - 1] * se
    mean = float(y.mean())
    floor, fraction = MATERIAL[name]
    growth = slope * seconds
    material = max(floor, fraction * abs(mean))
    return {
        "slope_per_s": slope,
        "margin_per_s": margin,
        "growth": growth,
        "mean": mean,
        "material": material,
        "grows": bool(slope - margin > 0 and growth >= material),
    }


def queue_word(verdict: str | None) -> str:
    """What a stage table says of a verdict ("-": a stage without one, e.g. an older summary's)."""
    return QUEUE_WORDS.get(verdict or "", "-")


def waiting_samples(rows: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """The server's waiting-queue gauge from the scraper's rows, as ``(t_ns, value)``."""
    return [(int(r["t_ns"]), float(r["waiting"])) for r in rows if r.get("waiting") is not None]
