"""A ``RecordTable`` (and the text fields it leaves out) as an Arrow table, and back.

The columns are derived from ``RequestRecord``'s fields, never listed: every scalar field is
stored by its kind in ``analysis.table_build.KINDS`` (an ``int`` as int64, an ``int | None`` as a
nullable int64, a ``bool | None`` as a nullable bool, a string dictionary-encoded), so a field
added to the record is carried with no edit here. Text fields (``records.TEXT_FIELDS``) are a
``list<string>`` when their type is ``list[str] | None``, else their JSON as a string.

The chunk lists are ``<part>_gaps``: a ``list<int32>`` per row, the first value the time from
the row's ``t_first_token_ns`` (else ``t_send_ns``) to its first chunk, the others the gap to
the previous chunk, in units of ``unit_ns`` (kept in the file's metadata). Each chunk's time is
rounded to that unit from the row's reference, so the error is at most half a unit per chunk and
never accumulates along a stream; ``t_last_chunk_ns`` and ``t_first_reasoning_ns`` are columns
of their own, exact. ``<part>_tokens`` holds the chunks' token counts. Imports numpy, pyarrow,
orjson and the table only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import orjson
import pyarrow as pa  # type: ignore[import-untyped]

from loadgen.analysis.chunks import Chunks, ones
from loadgen.analysis.table import KINDS, NULLABLE_BOOLS, SCALAR_FIELDS, RecordTable
from loadgen.records import TEXT_FIELDS, RequestRecord

_TYPES = {f.name: str(f.type).replace(" ", "") for f in dataclasses.fields(RequestRecord)}
# Text fields kept as list<string>; the others as their JSON.
LIST_TEXT = tuple(n for n in TEXT_FIELDS if _TYPES[n] == "list[str]|None")
JSON_TEXT = tuple(n for n in TEXT_FIELDS if n not in LIST_TEXT)
_DERIVED = ("t_last_chunk_ns", "t_first_reasoning_ns")  # exact columns beside the rounded chunks
_PARTS = (("chunks", "chunk"), ("reasoning", "reasoning"))
STRINGS = tuple(n for n in SCALAR_FIELDS if KINDS[n] == "str")  # read dictionary-encoded


def to_arrow(table: RecordTable, text: dict[str, list[Any]], unit_ns: int) -> pa.Table:
    """The columns of ``table``, its text fields from ``text`` (one value per row; a field
    missing from it is stored as nulls)."""
    n = len(table)
    cols: dict[str, pa.Array] = {}
    for name in SCALAR_FIELDS:
        cols[name] = _scalar(table, name)
    for name in _DERIVED:
        cols[name] = pa.array(table.column(name), mask=~table.present(name))
    for part, prefix in _PARTS:
        c: Chunks = getattr(table, part)
        # int64 throughout, so every row group has one schema: the dictionary encoding
        # Parquet applies first stores them in as few bits as int32 or uint8 would.
        offsets = pa.array(c.offsets.astype(np.int32))
        cols[f"{prefix}_gaps"] = pa.ListArray.from_arrays(offsets, pa.array(rounded(c, unit_ns)))
        tokens = pa.array(np.ascontiguousarray(c.tokens, dtype=np.int64))
        cols[f"{prefix}_tokens"] = pa.ListArray.from_arrays(offsets, tokens)
    for name in LIST_TEXT:
        cols[name] = pa.array(text.get(name, [None] * n), type=pa.list_(pa.string()))
    for name in JSON_TEXT:
        values = text.get(name, [None] * n)
        cols[name] = pa.array([None if v is None else orjson.dumps(v).decode() for v in values], pa.string())
    return pa.table(cols)


def from_arrow(t: pa.Table, unit_ns: int) -> RecordTable:
    """The ``RecordTable`` of the columns ``to_arrow`` wrote (the text columns are not read)."""
    columns: dict[str, Any] = {}
    present: dict[str, np.ndarray] = {}
    for name in (*SCALAR_FIELDS, *_DERIVED):
        col = t.column(name).combine_chunks() if t.num_rows else _empty(t, name)
        kind = "nint" if name in _DERIVED else KINDS[name]
        if kind == "nint":
            present[name] = np.asarray(col.is_valid()).astype(bool)
            columns[name] = np.asarray(col.fill_null(0), dtype=np.int64)
        elif kind == "float":
            columns[name] = np.asarray(col.cast(pa.float64()).fill_null(np.nan), dtype=np.float64)
        elif kind == "str":
            columns[name] = _strings(col)
        else:
            columns[name] = np.asarray(
                col.to_numpy(zero_copy_only=False), dtype=np.int64 if kind == "int" else bool
            )
    parts = {}
    for part, prefix in _PARTS:
        gaps = _flat(t, f"{prefix}_gaps")
        tokens = _flat(t, f"{prefix}_tokens")
        counts = _counts(t, f"{prefix}_gaps")
        chunks = Chunks(counts, np.empty(0, np.int32), ones(0))
        chunks.deltas = unrounded(gaps, chunks, unit_ns)
        chunks.tokens = ones(len(tokens)) if bool((tokens == 1).all()) else tokens
        parts[part] = chunks
    return RecordTable(columns, present, parts["chunks"], parts["reasoning"])


def text_values(t: pa.Table, name: str) -> list[Any]:
    """One text field's values, as the record holds them (None where it had none)."""
    values = t.column(name).to_pylist()
    return [None if v is None else orjson.loads(v) for v in values] if name in JSON_TEXT else values


def rounded(c: Chunks, unit_ns: int) -> np.ndarray:
    """The chunks' deltas in ``unit_ns``, each chunk's time rounded from its row's reference."""
    deltas = c.deltas.astype(np.int64)
    if unit_ns == 1 or not len(deltas):
        return deltas
    since = _within_rows(deltas, c)  # each chunk's time from its row's reference
    q = np.floor_divide(since + unit_ns // 2, unit_ns)
    out = np.empty_like(q)
    out[0] = q[0]
    np.subtract(q[1:], q[:-1], out=out[1:])
    firsts = c.offsets[:-1][c.counts > 0]
    out[firsts] = q[firsts]
    return out


def unrounded(gaps: np.ndarray, c: Chunks, unit_ns: int) -> np.ndarray:
    """``rounded``'s deltas back in nanoseconds (the rounded times' own gaps)."""
    g = gaps.astype(np.int64)
    if unit_ns == 1 or not len(g):
        return _narrow(g)
    since = _within_rows(g, c) * unit_ns
    out = np.empty_like(since)
    out[0] = since[0]
    np.subtract(since[1:], since[:-1], out=out[1:])
    firsts = c.offsets[:-1][c.counts > 0]
    out[firsts] = since[firsts]
    return _narrow(out)


def _within_rows(deltas: np.ndarray, c: Chunks) -> np.ndarray:
    """The running sum of ``deltas`` restarted at each row's first chunk."""
    summed = np.cumsum(deltas)
    before = np.concatenate(([0], summed))[c.offsets[:-1]]
    return summed - np.repeat(before, c.counts)


def _scalar(table: RecordTable, name: str) -> pa.Array:
    col, kind = table.column(name), KINDS[name]
    if kind == "nint":
        return pa.array(col, mask=~table.present(name))
    if kind == "float":
        missing = np.isnan(col)
        if name in NULLABLE_BOOLS:
            return pa.array(col == 1.0, mask=missing)
        return pa.array(col, mask=missing)
    if kind == "str":
        return pa.array(col.tolist(), pa.string()).dictionary_encode()
    return pa.array(col)


def _strings(col: pa.Array) -> np.ndarray:
    """An object array of the column's strings, each distinct one a single object."""
    out = np.empty(len(col), dtype=object)
    if isinstance(col, pa.DictionaryArray):
        words = np.array(col.dictionary.to_pylist() + [None], dtype=object)
        idx = col.indices.fill_null(len(col.dictionary))
        out[:] = words[np.asarray(idx, dtype=np.int64)]
    else:
        out[:] = col.to_pylist()
    return out


def _flat(t: pa.Table, name: str) -> np.ndarray:
    col = t.column(name).combine_chunks()
    return np.asarray(col.flatten().to_numpy(zero_copy_only=False))


def _counts(t: pa.Table, name: str) -> np.ndarray:
    col = t.column(name).combine_chunks()
    return np.asarray(col.value_lengths().fill_null(0), dtype=np.int64)


def _empty(t: pa.Table, name: str) -> pa.Array:
    return pa.array([], type=t.schema.field(name).type)


def _narrow(values: np.ndarray) -> np.ndarray:
    """int32 when every value fits (the usual case: gaps under 35 minutes in microseconds)."""
    if not len(values) or (values.min() >= -(2**31) and values.max() < 2**31):
        return values.astype(np.int32)
    return values
