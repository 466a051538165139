"""The list fields of a run's records, flat: what ``RecordTable`` keeps of its chunk lists.

A Python list of chunk times costs about 40 bytes a value; here a row's list is a slice of one
array of time deltas (int32 unless a gap exceeds 2^31 ns) and one of token counts (uint8 unless
a chunk carries more than 255 tokens), about 5 bytes a chunk. When every chunk carried one token
(most streams) the token array is ``ones(n)``, a read-only uint8 view of a single 1 that costs
nothing: about 4 bytes a chunk. Every pass over them walks ``row_ranges`` of at most
``BLOCK_CHUNKS`` chunks, so what a pass allocates is bounded too. Imports numpy only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

BLOCK_CHUNKS = 1 << 16  # chunks per block when a pass walks the chunk arrays: bounds its transients
_ONE = np.ones(1, np.uint8)


def ones(n: int) -> np.ndarray:
    """``n`` token counts of 1, as a read-only uint8 view of one element (no memory per chunk)."""
    return np.broadcast_to(_ONE, (n,))


def is_ones(tokens: np.ndarray) -> bool:
    """Whether ``tokens`` is a ``ones`` view (not merely an array of ones)."""
    return tokens.ndim == 1 and (len(tokens) == 0 or (tokens.strides == (0,) and int(tokens[0]) == 1))


class Chunks:
    """One pair of list fields of every row (``chunk_times_ns``/``chunk_tokens``, or the
    reasoning pair), flat: ``counts`` per row, ``deltas`` and ``tokens`` per chunk, ``offsets``
    (row i's chunks are ``offsets[i]:offsets[i + 1]``)."""

    __slots__ = ("counts", "deltas", "offsets", "tokens")

    def __init__(self, counts: np.ndarray, deltas: np.ndarray, tokens: np.ndarray) -> None:
        self.counts, self.deltas, self.tokens = counts, deltas, tokens
        self.offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=self.offsets[1:])

    @classmethod
    def empty(cls, rows: int = 0) -> Chunks:
        return cls(np.zeros(rows, np.int64), np.empty(0, np.int32), ones(0))

    @property
    def total(self) -> int:
        return int(self.offsets[-1])

    @property
    def nbytes(self) -> int:
        """Bytes held (a ``ones`` token view holds none)."""
        held = [self.counts, self.offsets, self.deltas] + ([] if is_ones(self.tokens) else [self.tokens])
        return sum(a.nbytes for a in held)

    def row_ranges(self, max_chunks: int = BLOCK_CHUNKS) -> Iterator[tuple[int, int]]:
        """Consecutive row ranges ``[r0, r1)`` of at most ``max_chunks`` chunks each (a row with
        more is a range of its own): the blocks a pass over the chunks walks."""
        rows, r = len(self.counts), 0
        while r < rows:
            end = int(np.searchsorted(self.offsets, self.offsets[r] + max_chunks, side="right")) - 1
            end = min(max(end, r + 1), rows)
            yield r, end
            r = end

    def times(self, base: np.ndarray, r0: int, r1: int) -> np.ndarray:
        """Absolute int64 times of the chunks of rows ``[r0, r1)``; ``base`` holds those rows'
        references (``RecordTable.chunk_base()[r0:r1]``)."""
        c0, c1 = int(self.offsets[r0]), int(self.offsets[r1])
        if c1 == c0:
            return np.empty(0, np.int64)
        summed = np.cumsum(self.deltas[c0:c1], dtype=np.int64)
        starts = self.offsets[r0:r1] - c0
        before = np.where(starts > 0, summed[np.maximum(starts - 1, 0)], 0)
        summed += np.repeat(base - before, self.counts[r0:r1])
        return summed

    def take(self, rows: np.ndarray) -> Chunks:
        """The chunks of ``rows`` (indices), in that order, gathered block by block."""
        out = Chunks(self.counts[rows], np.empty(0, self.deltas.dtype), ones(0))
        one = is_ones(self.tokens)
        deltas = np.empty(out.total, self.deltas.dtype)
        tokens = ones(out.total) if one else np.empty(out.total, self.tokens.dtype)
        src = self.offsets[rows]
        for a, b in out.row_ranges():
            lo, hi = int(out.offsets[a]), int(out.offsets[b])
            idx = np.repeat(src[a:b] - out.offsets[a:b], out.counts[a:b]) + np.arange(lo, hi)
            deltas[lo:hi] = self.deltas[idx]
            if not one:
                tokens[lo:hi] = self.tokens[idx]
        out.deltas, out.tokens = deltas, tokens
        return out

    @classmethod
    def concat(cls, parts: Sequence[Chunks]) -> Chunks:
        """The rows of ``parts`` one after another; each flat array is allocated once in the
        widest dtype of the parts and filled part by part (no second copy of the whole)."""
        if not parts:
            return cls.empty()
        arrays = []
        for name in ("deltas", "tokens"):
            pieces = [getattr(p, name) for p in parts]
            if name == "tokens" and all(is_ones(x) for x in pieces):
                arrays.append(ones(sum(len(x) for x in pieces)))
                continue
            out = np.empty(sum(len(x) for x in pieces), np.result_type(*pieces))
            pos = 0
            for x in pieces:
                out[pos : pos + len(x)] = x
                pos += len(x)
            arrays.append(out)
        return cls(np.concatenate([p.counts for p in parts]), arrays[0], arrays[1])


class ChunkBlock(NamedTuple):
    """Chunks of some rows, as ``RecordTable.chunk_blocks`` yields them."""

    rows: np.ndarray  # table row of each row in the block
    counts: np.ndarray  # chunks of each of those rows
    times: np.ndarray  # absolute int64 ns, row after row
    tokens: np.ndarray  # tokens each chunk carried, as stored (0 where a chunk said 0)
