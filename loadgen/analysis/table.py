"""A run's records as columns: what every analysis reads, in a small constant per stored value.

A ``RequestRecord`` holds its chunk times as a Python list of ints (about 40 bytes a value), so a
long run (100,000 requests x 256 tokens) held as records takes gigabytes. ``RecordTable`` keeps
each scalar field as one numpy array (a nullable int as int64 plus a ``present`` mask, a string
as an object array sharing repeated strings) and the chunk lists flat (``analysis.chunks``): one
count per row, one array of time deltas in the smallest signed dtype that holds them (int32
unless a gap exceeds 2^31 ns: about 4 bytes a chunk) and one of token counts in the smallest
unsigned dtype (uint8 unless a chunk carries more than 255 tokens). A row's first delta is
relative to its ``t_first_token_ns`` (its own first chunk, so normally 0) or, without one, its
``t_send_ns``; the others are the gap to the previous chunk. The reasoning lists are kept the
same way, so ``to_records`` rebuilds every record exactly, with two exceptions: a row whose
token list is not as long as its time list is stored (and rebuilt) with one token per chunk, the
rule every analysis applies to it anyway, and a negative token count is stored as 0 (which the
analysis counts as 1, as it did the negative count).

Building never holds a run's records as Python objects (``analysis.table_build``). This module
and its two helpers import only ``loadgen.records``, numpy and orjson.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.analysis.chunks import BLOCK_CHUNKS, ChunkBlock, Chunks
from loadgen.analysis.table_build import (
    DERIVED,
    KINDS,
    NULLABLE_BOOLS,
    RECORDS_PER_BLOCK,
    SCALAR_FIELDS,
    Builder,
    from_objects,
    parsed_blocks,
)
from loadgen.records import ReadReport, RequestRecord

__all__ = [
    "DERIVED",
    "KINDS",
    "NULLABLE_BOOLS",
    "SCALAR_FIELDS",
    "ChunkBlock",
    "Chunks",
    "RecordTable",
    "as_table",
]


class RecordTable:
    """A run's records as columns (see the module's docstring). Build one with ``from_file``,
    ``from_records`` or ``as_table``; read it with ``column``/``present``, ``chunks`` and
    ``chunk_blocks``; ``select`` and ``concat`` make new tables; ``to_records`` rebuilds the
    records."""

    __slots__ = ("_cols", "_present", "chunks", "reasoning")

    def __init__(
        self, columns: dict[str, Any], present: dict[str, np.ndarray], chunks: Chunks, reasoning: Chunks
    ) -> None:
        self._cols, self._present = columns, present
        self.chunks, self.reasoning = chunks, reasoning

    def __len__(self) -> int:
        return len(self.chunks.counts)

    def __repr__(self) -> str:
        return f"RecordTable({len(self)} rows, {self.chunks.total} chunks, {self.nbytes / 1e6:.1f} MB)"

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (not of the strings object columns point to)."""
        arrays = [*self._cols.values(), *self._present.values()]
        return int(sum(a.nbytes for a in arrays)) + self.chunks.nbytes + self.reasoning.nbytes

    def column(self, name: str) -> np.ndarray:
        """A scalar field (0 where a nullable int is missing, NaN for a missing
        ``retry_after_s``, None for a missing string) or a derived column (``DERIVED``)."""
        if name == "n_chunks":
            return self.chunks.counts
        if name == "n_reasoning":
            return self.reasoning.counts
        return self._cols[name]

    def present(self, name: str) -> np.ndarray:
        """Where a nullable int column (or ``t_last_chunk_ns``, ``t_first_reasoning_ns``) has a value."""
        return self._present[name]

    def ints(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(values with 0 where missing, present mask) of a nullable int column."""
        return self._cols[name], self._present[name]

    def chunk_base(self) -> np.ndarray:
        """Each row's reference for its first chunk delta: ``t_first_token_ns``, else ``t_send_ns``."""
        first, has = self.ints("t_first_token_ns")
        return np.where(has, first, self._cols["t_send_ns"])

    def chunk_blocks(
        self, rows: np.ndarray | None = None, *, reasoning: bool = False, max_chunks: int = BLOCK_CHUNKS
    ) -> Iterator[ChunkBlock]:
        """The absolute chunk times (and tokens) of the rows where the bool mask ``rows`` is
        set (default: all), a block of at most about ``max_chunks`` chunks at a time."""
        c = self.reasoning if reasoning else self.chunks
        base = self.chunk_base()
        for r0, r1 in c.row_ranges(max_chunks):
            sel = None if rows is None else rows[r0:r1]
            if sel is not None and not sel.any():
                continue
            times = c.times(base[r0:r1], r0, r1)
            tokens = c.tokens[c.offsets[r0] : c.offsets[r1]]
            counts, index = c.counts[r0:r1], np.arange(r0, r1)
            if sel is not None:
                keep = np.repeat(sel, counts)
                times, tokens, counts, index = times[keep], tokens[keep], counts[sel], index[sel]
            yield ChunkBlock(index, counts, times, tokens)

    def select(self, which: np.ndarray | Sequence[int]) -> RecordTable:
        """The rows a bool mask sets, or the rows at the given indices (in their order)."""
        arr = np.asarray(which)
        idx = np.flatnonzero(arr) if arr.dtype == bool else arr.astype(np.int64)
        return RecordTable(
            {k: v[idx] for k, v in self._cols.items()},
            {k: v[idx] for k, v in self._present.items()},
            self.chunks.take(idx),
            self.reasoning.take(idx),
        )

    def without_chunks(self) -> RecordTable:
        """The same rows without their chunk and reasoning lists (``n_chunks``/``n_reasoning``
        read 0; ``t_last_chunk_ns`` and ``t_first_reasoning_ns`` stay): all a frame of the run
        needs, in a small part of the memory. The report drops the lists once it has drawn
        what needs them."""
        return RecordTable(self._cols, self._present, Chunks.empty(len(self)), Chunks.empty(len(self)))

    @classmethod
    def concat(cls, tables: Sequence[RecordTable]) -> RecordTable:
        """The rows of ``tables`` one after another (the dtypes widen to the widest)."""
        if not tables:
            return cls.from_records(())
        return cls(
            {k: np.concatenate([t._cols[k] for t in tables]) for k in tables[0]._cols},
            {k: np.concatenate([t._present[k] for t in tables]) for k in tables[0]._present},
            Chunks.concat([t.chunks for t in tables]),
            Chunks.concat([t.reasoning for t in tables]),
        )

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord]) -> RecordTable:
        """The table of in-memory records (a type error in a field raises, as a bug would)."""
        build = Builder()
        it = iter(records)
        while block := list(itertools.islice(it, RECORDS_PER_BLOCK)):
            build.add(from_objects(block))
        return cls(*build.finish())

    @classmethod
    def from_file(
        cls, path: str | Path, report: ReadReport | None = None, start: int = 0, end: int | None = None
    ) -> RecordTable:
        """The table of a requests.jsonl, or of its byte range ``[start, end)`` (whole lines: a
        stage's records are contiguous). A line that does not parse, is not an object, or lacks
        a required field is skipped and counted in ``report`` as ``records.read_records`` does
        (line numbers count from ``start``); so is a line whose values are not of their
        fields' types (``read_records`` would pass it on, to fail later in an analysis)."""
        build = Builder()
        for rows, lines in parsed_blocks(Path(path), start, end, report):
            build.add_checked(rows, lines, report)
        return cls(*build.finish())

    def iter_records(self) -> Iterator[RequestRecord]:
        """The records again, one at a time (see the module's docstring for what is exact)."""
        base = self.chunk_base()
        for r0 in range(0, len(self), RECORDS_PER_BLOCK):
            r1 = min(r0 + RECORDS_PER_BLOCK, len(self))
            values = {name: self._python(name, r0, r1) for name in SCALAR_FIELDS}
            lists = {}
            for c, times, tokens in (
                (self.chunks, "chunk_times_ns", "chunk_tokens"),
                (self.reasoning, "reasoning_times_ns", "reasoning_tokens"),
            ):
                t = c.times(base[r0:r1], r0, r1).tolist()
                k = c.tokens[c.offsets[r0] : c.offsets[r1]].tolist()
                bounds = (c.offsets[r0 : r1 + 1] - c.offsets[r0]).tolist()
                lists[times] = [t[a:b] for a, b in zip(bounds, bounds[1:])]
                lists[tokens] = [k[a:b] for a, b in zip(bounds, bounds[1:])]
            every = {**values, **lists}
            for i in range(r1 - r0):
                yield RequestRecord(**{name: col[i] for name, col in every.items()})

    def to_records(self) -> list[RequestRecord]:
        """Every record rebuilt: every scalar field exactly, and the chunk and reasoning lists
        exactly but for the two cases the module's docstring names."""
        return list(self.iter_records())

    def _python(self, name: str, r0: int, r1: int) -> list[Any]:
        col = self._cols[name][r0:r1]
        if KINDS[name] not in ("nint", "float"):
            return col.tolist()
        missing = ~self._present[name][r0:r1] if KINDS[name] == "nint" else np.isnan(col)
        out = (col == 1.0).astype(object) if name in NULLABLE_BOOLS else col.astype(object)
        out[missing] = None  # python ints, floats or bools, None where missing
        return out.tolist()


def as_table(records: RecordTable | Iterable[RequestRecord]) -> RecordTable:
    """``records`` as a table (a table is returned as it is)."""
    return records if isinstance(records, RecordTable) else RecordTable.from_records(records)
