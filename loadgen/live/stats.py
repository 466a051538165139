"""A run's figures as it goes: what the live dashboard shows and the exporters publish.

Fed one finished record at a time (``add``): in a run of this process, the records sink's writer
hands each record over; with worker processes, the parent parses the lines they send (the
parent drives no load, so its parsing costs the measurement nothing). The hot path pays one
call and a few appends per record; every percentile is computed only when a view asks for a
``snapshot``, a few times a second.

Two horizons, both of measured (not warm-up) requests: the last ``window_s`` seconds (a
deque trimmed by the record's end time), and the current stage so far (log-spaced histograms
with 1 % wide bins from 0.01 ms to 1000 s, exact to 1 % and of fixed size however long the
stage). The definitions are the summary's: TTFT from send to the first token-bearing chunk, TPOT
from the first to the last chunk over the output tokens after the first, ITL the gaps between
chunks (a record gives at most ``ITL_PER_RECORD`` of its gaps, evenly spaced, to the window and
the stage's histogram). The window lives in fixed numpy rings (``_RECENT`` records, ``_GAPS``
gaps; a run faster than that over the window shows its last ones): one index write a value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from loadgen.clock import now_ns
from loadgen.metric_defs import tpot_ms
from loadgen.records import RequestRecord

__all__ = ["ITL_PER_RECORD", "LiveStats", "LogHistogram", "Snapshot"]

ITL_PER_RECORD = 8
_RECENT, _GAPS = 1 << 17, 1 << 18  # the window's capacity: records, and sampled gaps
_LO_MS, _RATIO = 0.01, 1.01
_BINS = int(math.log(1e6 / _LO_MS) / math.log(_RATIO)) + 2  # 0.01 ms .. 1000 s


class LogHistogram:
    """Counts in log-spaced bins 1 % wide: percentiles within 1 %, in constant memory."""

    __slots__ = ("counts", "n")

    def __init__(self) -> None:
        self.counts = np.zeros(_BINS, dtype=np.int64)
        self.n = 0

    def add(self, ms: float) -> None:
        k = 0 if ms <= _LO_MS else min(_BINS - 1, int(math.log(ms / _LO_MS) / math.log(_RATIO)) + 1)
        self.counts[k] += 1
        self.n += 1

    def percentile(self, q: float) -> float | None:
        """The q-th percentile (0-100): the upper edge of the bin that holds it."""
        if self.n == 0:
            return None
        k = int(np.searchsorted(np.cumsum(self.counts), math.ceil(q / 100 * self.n)))
        return _LO_MS * _RATIO**k

    def bars(self, n_bars: int = 12) -> list[tuple[float, int]]:
        """The histogram in ``n_bars`` log-spaced bars over the range that holds counts:
        (upper edge in ms, count) each; for the dashboard's small histogram."""
        nz = np.nonzero(self.counts)[0]
        if nz.size == 0:
            return []
        lo, hi = int(nz[0]), int(nz[-1]) + 1
        edges = np.linspace(lo, hi, n_bars + 1).round().astype(int)
        return [
            (_LO_MS * _RATIO ** int(b), int(self.counts[a:b].sum()))
            for a, b in zip(edges[:-1], edges[1:])
            if b > a
        ]


@dataclass(slots=True)
class Snapshot:
    """What a view shows at one moment (ms, per s; None where nothing was measured yet)."""

    elapsed_s: float
    stage: int
    done: int
    errors: dict[str, int]
    window_s: float
    window: dict[str, dict[str, float | None]]  # metric -> {"p50", "p99"} over the last window_s
    stage_so_far: dict[str, dict[str, float | None]]  # metric -> {"p50", "p99"} this stage
    requests_per_s: float
    output_tokens_per_s: float
    histogram: list[tuple[float, int]]  # this stage's TTFT, (upper edge ms, count)


@dataclass(slots=True)
class _Stage:
    index: int
    ttft: LogHistogram = field(default_factory=LogHistogram)
    tpot: LogHistogram = field(default_factory=LogHistogram)
    itl: LogHistogram = field(default_factory=LogHistogram)


class _Ring:
    """The last ``cap`` rows of (time, values...), in fixed arrays: append is an index write."""

    __slots__ = ("cap", "cols", "n", "t")

    def __init__(self, cap: int, width: int) -> None:
        self.cap, self.n = cap, 0
        self.t = np.zeros(cap, np.int64)
        self.cols = np.full((cap, width), np.nan)

    def append(self, t: int, values: tuple[float, ...]) -> None:
        i = self.n % self.cap
        self.t[i] = t
        self.cols[i] = values
        self.n += 1

    def since(self, cut: int) -> np.ndarray:
        k = min(self.n, self.cap)
        return self.cols[:k][self.t[:k] >= cut]


class LiveStats:
    """Finished records in, snapshots out (see the module's docstring)."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._window_ns = int(window_s * 1e9)
        self._t0 = now_ns()
        self._done = 0
        self._errors: Counter[str] = Counter()
        # (t_end_ns; ttft_ms | nan, tpot_ms | nan, output tokens) per measured ok record
        self._recent = _Ring(_RECENT, 3)
        self._gaps = _Ring(_GAPS, 1)  # (t_end_ns; a sampled itl gap, ms)
        self._stage = _Stage(0)
        self.listeners: list[Callable[[RequestRecord], None]] = []  # exporters: every record
        # Set by the runner as it goes: the stage (index, name, count, load), the machine's
        # self-check beside this run's load, and where the server's latest scrape is read.
        self.context: dict[str, Any] = {}
        self.server_row: Callable[[], dict | None] = lambda: None
        self.counters: Any = None  # the run's live counters (in_flight, done), set as it starts

    def add(self, rec: RequestRecord) -> None:
        for listen in self.listeners:
            listen(rec)
        self._done += 1
        if not rec.ok:
            self._errors[rec.error_class or "unknown"] += 1
        if rec.warmup or not rec.ok or rec.t_end_ns is None:
            return
        if rec.stage != self._stage.index:
            self._stage = _Stage(rec.stage)
        st, end = self._stage, rec.t_end_ns
        ttft = tpot = math.nan
        if rec.t_first_token_ns is not None:
            ttft = (rec.t_first_token_ns - rec.t_send_ns) / 1e6
            st.ttft.add(ttft)
        chunks, out = rec.chunk_times_ns, rec.counted_output_tokens
        if len(chunks) >= 2 and out >= 2 and rec.t_first_token_ns is not None:
            tpot = float(tpot_ms(rec.t_first_token_ns, chunks[-1], out))
            st.tpot.add(tpot)
            step = max(1, (len(chunks) - 1) // ITL_PER_RECORD)
            for i in range(1, len(chunks), step):
                gap = (chunks[i] - chunks[i - 1]) / 1e6
                st.itl.add(gap)
                self._gaps.append(end, (gap,))
        self._recent.append(end, (ttft, tpot, out))

    def add_lines(self, lines: bytes) -> None:
        """Records as worker processes serialised them, one JSON line each."""
        for line in lines.splitlines():
            if line:
                self.add(RequestRecord.from_dict(orjson.loads(line)))

    def snapshot(self) -> Snapshot:
        now = now_ns()
        cut = now - self._window_ns
        elapsed = (now - self._t0) / 1e9
        span = min(self.window_s, elapsed) or 1e-9
        rows = self._recent.since(cut)
        gaps = self._gaps.since(cut)[:, 0]
        window = {
            "ttft_ms": _p(rows[:, 0]),
            "tpot_ms": _p(rows[:, 1]),
            "itl_ms": _p(gaps),
        }
        st = self._stage
        so_far = {
            name: {"p50": h.percentile(50), "p99": h.percentile(99)}
            for name, h in (("ttft_ms", st.ttft), ("tpot_ms", st.tpot), ("itl_ms", st.itl))
        }
        return Snapshot(
            elapsed_s=elapsed,
            stage=st.index,
            done=self._done,
            errors=dict(self._errors),
            window_s=self.window_s,
            window=window,
            stage_so_far=so_far,
            requests_per_s=len(rows) / span,
            output_tokens_per_s=float(rows[:, 2].sum()) / span,
            histogram=st.ttft.bars(),
        )


def _p(values: np.ndarray) -> dict[str, float | None]:
    v = values[~np.isnan(values)]
    if v.size == 0:
        return {"p50": None, "p99": None}
    p50, p99 = np.percentile(v, [50, 99])
    return {"p50": float(p50), "p99": float(p99)}
