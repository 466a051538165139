"""Inter-token gaps read from a ``RecordTable`` block by block, and their exact statistics.

A run of 100,000 requests x 256 tokens has 25 million gaps: as float64 ms that is 200 MB, and a
percentile of it copies it again, more than the whole table (4 or 5 bytes a chunk). So the
summary never materialises them: ``GapSamples`` stands for the gaps of some rows (each row's
chunk deltas but its first), and ``stream_stats`` computes what ``metrics.distribution`` gives
of an array (count, mean, population std, min, numpy's linear percentiles, max) in passes over
blocks. The percentiles are exact: the order statistics they interpolate are found by radix
selection (each pass histograms the values still in question into 2^16 bins in all, and keeps
the bin holding each wanted rank; integer gaps need two or three passes), then interpolated as
numpy does. The
mean and std are summed per block and the partial sums added exactly (``math.fsum``), so they
may differ from numpy's pairwise sums in the last bits only. At most ``SMALL`` samples are
simply materialised, and numpy computes as before, bit for bit.

Per token, a gap ``g`` whose later chunk carried ``n`` tokens stands for ``n`` samples of
``g / n``: the stream yields each once with weight ``n`` (the same numbers ``np.repeat`` would
give, never repeated in memory). When every chunk carries one token the per-token samples are
the per-chunk ones, and ``GapSamples`` says so (``one_token_each``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from loadgen.analysis.chunks import is_ones
from loadgen.analysis.table import RecordTable

SMALL = 1 << 16  # up to this many samples: materialise, and let numpy compute as it always did
_BINS = 1 << 16  # radix selection: bins a pass, shared by the ranks still in question
_SIGN_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)

Block = tuple[np.ndarray, np.ndarray | None]  # (values in ms, weights or None)


class GapSamples:
    """The gaps (ms) between consecutive chunks of the table's rows where ``rows`` is set and
    that have two chunks or more, in row order: ``metrics.itl_values``'s numbers, unmaterialised.
    ``per_token``: each gap divided among the tokens its later chunk carried (a chunk counted
    as 0 tokens counts as 1). ``np.asarray(samples)`` materialises them."""

    def __init__(self, table: RecordTable, rows: np.ndarray, *, per_token: bool = False) -> None:
        c = self._chunks = table.chunks
        self._rows = np.asarray(rows, dtype=bool) & (c.counts >= 2)
        self.gaps = int((c.counts[self._rows] - 1).sum())
        self.one_token_each = is_ones(c.tokens) or int(c.tokens.max()) <= 1
        if not self.one_token_each:  # some chunk carried more: does any of these gaps end in one?
            self.one_token_each = all(int(n.max()) <= 1 for _, n in self.raw_blocks(True) if len(n))
        self.per_token = per_token and not self.one_token_each
        self.size = sum(int(n.sum()) for _, n in self.raw_blocks(True)) if self.per_token else self.gaps
        self.stats: dict[tuple[float, ...], dict[str, Any]] = {}  # stream_stats' results

    def __len__(self) -> int:
        return self.size

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.to_ms()
        return out if dtype is None else out.astype(dtype)

    def raw_blocks(self, tokens: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(gaps in ns as stored, tokens of each gap's later chunk, at least 1, or an empty
        array when ``tokens`` is false) per block."""
        c = self._chunks
        for r0, r1 in c.row_ranges():
            rows = self._rows[r0:r1]
            if not rows.any():
                continue
            c0, c1, counts = c.offsets[r0], c.offsets[r1], c.counts[r0:r1]
            keep = np.repeat(rows, counts)
            keep[c.offsets[r0:r1][counts > 0] - c0] = False  # a row's first delta is not a gap
            n = np.maximum(c.tokens[c0:c1][keep], 1) if tokens else np.empty(0, np.uint8)
            yield c.deltas[c0:c1][keep], n

    def blocks(self) -> Iterator[Block]:
        """(values in ms, weights: tokens per value, or None for one each) per block."""
        for g, n in self.raw_blocks(self.per_token):
            v = g / 1e6
            yield (v / n, n) if self.per_token else (v, None)

    def to_ms(self) -> np.ndarray:
        """Every sample as float64 ms (per token: repeated), as ``metrics.itl_values`` returns them."""
        out, pos = np.empty(self.size, np.float64), 0
        for v, n in self.blocks():
            part = v if n is None else np.repeat(v, n)
            out[pos : pos + len(part)] = part
            pos += len(part)
        return out

    def owners(self) -> np.ndarray:
        """The table row of each gap (per token: of each repeated sample)."""
        counts = self._chunks.counts
        rows = np.repeat(np.flatnonzero(self._rows), counts[self._rows] - 1)
        return np.repeat(rows, self.tokens()) if self.per_token else rows

    def tokens(self) -> np.ndarray:
        """Tokens of each gap's later chunk (at least 1), int64."""
        parts = [n.astype(np.int64) for _, n in self.raw_blocks(True)]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def sort_keys(self) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray | None]]]:
        """Integer sort keys per block (with weights): the gaps themselves, or per token the
        float64 values' bits ordered as the values are."""

        def gen() -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
            if not self.per_token:
                for g, _ in self.raw_blocks(False):
                    yield g.astype(np.int64), None
                return
            for v, n in self.blocks():
                bits = v.view(np.int64)
                yield np.where(bits < 0, bits ^ _SIGN_FLIP, bits), n

        return gen

    def value_of(self, key: int) -> float:
        """The sample (ms) a sort key stands for."""
        if not self.per_token:
            return key / 1e6
        bits = key if key >= 0 else key ^ int(_SIGN_FLIP)
        return float(np.int64(bits).view(np.float64))


def stream_stats(samples: GapSamples, percentiles: Sequence[float]) -> dict[str, Any]:
    """count, mean, std (population), min, the ``percentiles`` (numpy's linear method) and max
    of ``samples`` (which must not be empty), in passes over its blocks. Kept on ``samples``:
    the summary asks twice when the per-token samples are the per-chunk ones."""
    key = tuple(percentiles)
    if key not in samples.stats:
        samples.stats[key] = _stream_stats(samples, percentiles)
    return samples.stats[key]


def _stream_stats(samples: GapSamples, percentiles: Sequence[float]) -> dict[str, Any]:
    total, sums = 0, []
    lo_v, hi_v = math.inf, -math.inf
    for v, n in samples.blocks():
        total += len(v) if n is None else int(n.sum())
        sums.append(float(v.sum() if n is None else v @ n))
        lo_v, hi_v = min(lo_v, float(v.min())), max(hi_v, float(v.max()))
    mean = math.fsum(sums) / total
    squares = []
    for v, n in samples.blocks():
        d = v - mean
        squares.append(float(d @ d if n is None else (d * d) @ n))
    keys = samples.sort_keys()
    lo_k, hi_k = 2**63, -(2**63)
    for k, _ in keys():
        lo_k, hi_k = min(lo_k, int(k.min())), max(hi_k, int(k.max()))
    plan = linear_percentile_plan(total, percentiles)
    ranks = {r for p, q, _ in plan for r in (p, q)}
    found = order_statistics(keys, ranks, lo_k, hi_k)
    pct = [_lerp(samples.value_of(found[p]), samples.value_of(found[q]), g) for p, q, g in plan]
    return {
        "count": total,
        "mean": mean,
        "std": math.sqrt(math.fsum(squares) / total),
        "min": lo_v,
        "percentiles": pct,
        "max": hi_v,
    }


def linear_percentile_plan(n: int, percentiles: Sequence[float]) -> list[tuple[int, int, float]]:
    """(lower rank, upper rank, weight) of each percentile of ``n`` sorted values, computed as
    ``np.percentile(..., method="linear")`` computes them (so the result is its, to the bit)."""
    virtual = (n - 1) * np.true_divide(np.asarray(percentiles, dtype=np.float64), 100)
    out = []
    for v in virtual.tolist():
        if v >= n - 1:
            out.append((n - 1, n - 1, 0.0))
        elif v < 0:
            out.append((0, 0, 0.0))
        else:
            p = math.floor(v)
            out.append((p, p + 1, v - p))
    return out


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's interpolation between neighbouring order statistics (``_lerp``)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def order_statistics(
    blocks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray | None]]],
    ranks: set[int],
    lo: int,
    hi: int,
) -> dict[int, int]:
    """The value of rank ``k`` (0-based, in sorted order, each value counted ``weight`` times)
    for each ``k`` in ``ranks``, of int64 values in ``[lo, hi]`` that ``blocks()`` yields anew
    on every call: radix selection, ``_BINS`` bins of the ranges still in question a pass."""
    found: dict[int, int] = {}
    todo = {k: (lo, hi, 0) for k in ranks}  # rank -> (a, b, how many values lie below a)
    while todo:
        groups: dict[tuple[int, int, int], list[int]] = {}
        for k, span in todo.items():
            groups.setdefault(span, []).append(k)
        todo = {}
        plan = []
        bits = max(8, _BINS.bit_length() - 1 - (len(groups) - 1).bit_length())
        for (a, b, below), ks in groups.items():
            if a == b:
                found.update(dict.fromkeys(ks, a))
                continue
            shift = max(0, (b - a).bit_length() - bits)
            plan.append((a, b, below, ks, shift, np.zeros(((b - a) >> shift) + 1, np.int64)))
        for keys, weights in blocks() if plan else ():
            for a, b, _, _, shift, counts in plan:
                inside = (keys >= a) & (keys <= b)
                # the bin: the offset from a, modulo 2^64 so that no range overflows, in place
                bins = keys[inside].view(np.uint64)
                bins -= np.uint64(a % 2**64)
                bins >>= np.uint64(shift)
                w = None if weights is None else weights[inside]
                counts += np.bincount(bins.view(np.int64), weights=w, minlength=len(counts)).astype(np.int64)
        for a, b, below, ks, shift, counts in plan:
            cum = np.cumsum(counts)
            for k in ks:
                j = int(np.searchsorted(cum, k - below, side="right"))
                start = a + (j << shift)
                if shift == 0:
                    found[k] = start
                else:
                    todo[k] = (start, min(b, start + (1 << shift) - 1), below + (int(cum[j - 1]) if j else 0))
    return found


def cdf_points(values: Any, points: int = 4096) -> tuple[np.ndarray, np.ndarray, int]:
    """(x, fraction of samples <= x, number of samples) to draw an empirical CDF: every sorted
    value when there are at most ``SMALL``; otherwise the exact fraction at the right edge of
    ``points`` equal bins spanning the values, streamed (a bin is far below a pixel wide)."""
    if not isinstance(values, GapSamples) or values.size <= SMALL:
        arr = np.asarray(values, dtype=np.float64)
        v = np.sort(arr[~np.isnan(arr)])
        return v, np.arange(1, v.size + 1) / max(v.size, 1), int(v.size)
    lo = min(float(v.min()) for v, _ in values.blocks())
    hi = max(float(v.max()) for v, _ in values.blocks())
    width = (hi - lo) / points or 1.0
    counts = np.zeros(points, np.float64)
    for v, n in values.blocks():
        idx = np.clip(((v - lo) / width).astype(np.int64), 0, points - 1)
        counts += np.bincount(idx, weights=n, minlength=points)
    x = lo + width * np.arange(1, points + 1)
    return x, np.cumsum(counts) / values.size, values.size
