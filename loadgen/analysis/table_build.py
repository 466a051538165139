"""Building a ``RecordTable``'s arrays from records or requests.jsonl lines, block by block.

Never all of a run's records as Python objects at once: ``parsed_blocks`` reads 256 KB of
lines at a time, ``Builder.add`` turns a block into arrays and appends them to buffers grown in
place (``ndarray.resize`` reallocates, which on Linux remaps pages instead of copying them: the
peak is the table plus one block, not twice the table). It also defines the storage of each
field (``KINDS``) and what a line needs to be a record. Imports ``loadgen.records``, numpy and
orjson only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson

from loadgen.analysis.chunks import Chunks, ones
from loadgen.records import TEXT_FIELDS, ReadReport, RequestRecord

_FIELDS = dataclasses.fields(RequestRecord)
# The answer's text stays in the file (output agreement streams it from there): a column of
# strings would cost the table more than every timestamp it holds.
SCALAR_FIELDS: tuple[str, ...] = tuple(
    f.name for f in _FIELDS if f.default_factory is not list and f.name not in TEXT_FIELDS
)
_KINDS = {"int": "int", "bool": "bool", "int|None": "nint", "float|None": "float", "bool|None": "float"}
_KINDS.update({"str": "str", "str|None": "str"})
# Stored as floats (NaN where missing), rebuilt as bools.
NULLABLE_BOOLS = frozenset(f.name for f in _FIELDS if str(f.type).replace(" ", "") == "bool|None")
# Each scalar field's storage: a new field of another type fails here, at import, not in a run.
KINDS: dict[str, str] = {
    f.name: _KINDS[str(f.type).replace(" ", "")] for f in _FIELDS if f.name in SCALAR_FIELDS
}
# Per-row values derived from the lists when building: the analysis needs no more of them.
DERIVED: tuple[str, ...] = ("t_last_chunk_ns", "t_first_reasoning_ns", "n_chunks", "n_reasoning")
_DEFAULTS = {f.name: f.default for f in _FIELDS if f.default is not dataclasses.MISSING}
_REQUIRED = frozenset(
    f.name for f in _FIELDS if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
RECORDS_PER_BLOCK = 2048
_READ_BYTES = 1 << 18  # bytes of requests.jsonl parsed at a time (more is no faster)
_MAX_SHARED = 4096  # distinct strings per column shared as one object; past that, kept as read


class Parts(NamedTuple):
    """What a ``RecordTable`` is made of."""

    columns: dict[str, Any]
    present: dict[str, np.ndarray]
    chunks: Chunks
    reasoning: Chunks


class _Growing:
    """A 1-d array appended to block by block, grown in place by a sixteenth at a time (numpy
    zero-fills what it grows by, so the unused tail costs memory: keep it small); a block
    of a wider dtype (a gap > 2^31 ns, a chunk of > 255 tokens) widens what came before.
    ``tokens``: while every value is 1 nothing is stored, and ``finish`` gives ``ones(n)``."""

    def __init__(self, dtype: Any, tokens: bool = False) -> None:
        self._arr, self._n = np.empty(0, dtype), 0
        self._ones = tokens  # every value so far was 1, and none is stored

    def add(self, block: np.ndarray) -> None:
        if self._ones:
            if bool((block == 1).all()):
                self._n += len(block)
                return
            self._ones, n = False, self._n
            self._arr, self._n = np.empty(0, self._arr.dtype), 0
            self.add(np.ones(n, self._arr.dtype))
        dtype = np.promote_types(self._arr.dtype, block.dtype)
        if dtype != self._arr.dtype:
            self._arr = self._arr[: self._n].astype(dtype)
        need = self._n + len(block)
        if need > len(self._arr):
            self._arr.resize(max(need, len(self._arr) + len(self._arr) // 16 + 4096), refcheck=False)
        self._arr[self._n : need] = block
        self._n = need

    def finish(self) -> np.ndarray:
        if self._ones:
            return ones(self._n)
        self._arr.resize(self._n, refcheck=False)
        return self._arr


# A block of rows as (how many, field name -> its values in the block): records and parsed
# lines are read the same way.
_Getter = Callable[[str], list[Any]]


def from_objects(block: list[RequestRecord]) -> tuple[int, _Getter]:
    """A block of records, to ``Builder.add``."""
    return len(block), lambda name: [getattr(r, name) for r in block]


def _from_dicts(block: list[dict[str, Any]]) -> tuple[int, _Getter]:
    return len(block), lambda name: [d.get(name, _DEFAULTS.get(name)) for d in block]


class Builder:
    """Blocks of rows in, a ``RecordTable``'s ``Parts`` out (``finish``). Strings repeated in
    a column (error classes, token sources) are kept as one object each."""

    def __init__(self) -> None:
        self._arrays: dict[str, _Growing] = {}
        self._objects: dict[str, list[Any]] = {k: [] for k, v in KINDS.items() if v == "str"}
        self._shared: dict[str, dict[str, str]] = {k: {} for k in self._objects}

    def add(self, block: tuple[int, _Getter]) -> None:
        n, get = block
        for name, arr in _encode(n, get).items():
            if name in self._objects:
                self._objects[name].extend(self._share(name, arr))
            else:
                self._arrays.setdefault(name, _Growing(arr.dtype, name.endswith("#tokens"))).add(arr)

    def add_checked(self, rows: list[dict[str, Any]], lines: list[int], report: ReadReport | None) -> None:
        """Add parsed lines; when a value is not of its field's type, find those lines one by
        one, count them as skipped and add the rest."""
        try:
            self.add(_from_dicts(rows))
            return
        except (TypeError, ValueError, OverflowError):
            pass
        good = []
        for row, line in zip(rows, lines):
            try:
                _encode(*_from_dicts([row]))
                good.append(row)
            except (TypeError, ValueError, OverflowError):
                _skip(report, line)
        self.add(_from_dicts(good))

    def _share(self, name: str, values: list[Any]) -> list[Any]:
        seen = self._shared[name]
        if len(seen) >= _MAX_SHARED:
            return values
        return [v if v is None else seen.setdefault(v, v) for v in values]

    def finish(self) -> Parts:
        if not self._arrays:  # no rows: every column empty, in its dtype
            self.add(from_objects([]))
        cols = {k: g.finish() for k, g in self._arrays.items()}
        for name, values in self._objects.items():
            arr = np.empty(len(values), dtype=object)
            arr[:] = values
            cols[name] = arr
        present = {k[:-8]: cols.pop(k) for k in list(cols) if k.endswith("#present")}
        parts = {}
        for p in ("chunks", "reasoning"):
            parts[p] = Chunks(cols.pop(f"{p}#counts"), cols.pop(f"{p}#deltas"), cols.pop(f"{p}#tokens"))
        ordered = {k: cols[k] for k in (*SCALAR_FIELDS, "t_last_chunk_ns", "t_first_reasoning_ns")}
        return Parts(ordered, present, parts["chunks"], parts["reasoning"])


def _encode(n: int, get: _Getter) -> dict[str, Any]:
    """One block of rows as arrays: columns, ``<name>#present`` masks, ``<part>#...`` chunk arrays."""
    out: dict[str, Any] = {}
    for name, kind in KINDS.items():
        vals = get(name)
        if kind == "int":
            out[name] = np.array(vals, dtype=np.int64).reshape(n)
        elif kind == "bool":
            out[name] = np.array(vals, dtype=bool).reshape(n)
        elif kind == "nint":
            out[f"{name}#present"] = np.array([v is not None for v in vals], dtype=bool).reshape(n)
            out[name] = np.array([0 if v is None else v for v in vals], dtype=np.int64).reshape(n)
        elif kind == "float":
            out[name] = np.array([np.nan if v is None else v for v in vals], dtype=np.float64).reshape(n)
        else:
            if any(v is not None and not isinstance(v, str) for v in vals):
                raise TypeError(f"{name}: not a string")
            out[name] = vals
    base = np.where(out["t_first_token_ns#present"], out["t_first_token_ns"], out["t_send_ns"])
    for part, times, tokens, derived in (
        ("chunks", "chunk_times_ns", "chunk_tokens", "t_last_chunk_ns"),
        ("reasoning", "reasoning_times_ns", "reasoning_tokens", "t_first_reasoning_ns"),
    ):
        counts, deltas, toks, first, last = _encode_lists(get(times), get(tokens), base)
        out[f"{part}#counts"], out[f"{part}#deltas"], out[f"{part}#tokens"] = counts, deltas, toks
        out[derived] = last if part == "chunks" else first
        out[f"{derived}#present"] = counts > 0
    return out


def _encode_lists(
    times_l: list[Any], tokens_l: list[Any], base: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(counts, deltas, tokens, first time, last time) of one block's lists of one pair."""
    n = len(times_l)
    counts = np.fromiter((len(t) if t else 0 for t in times_l), np.int64, n)
    total = int(counts.sum())
    times = np.fromiter(itertools.chain.from_iterable(t for t in times_l if t), np.int64, total)
    lengths = np.fromiter((len(t) if t else 0 for t in tokens_l), np.int64, n)
    if np.array_equal(lengths, counts):
        flat = itertools.chain.from_iterable(t for t in tokens_l if t)
    else:  # a row whose token list does not match its chunks counts one token per chunk
        same = (lengths == counts).tolist()
        flat = itertools.chain.from_iterable(
            t if s else itertools.repeat(1, c) for t, s, c in zip(tokens_l, same, counts.tolist()) if c
        )
    tokens = np.fromiter(flat, np.int64, total)
    has = counts > 0
    ends = np.cumsum(counts)
    firsts, lasts = (ends - counts)[has], ends[has] - 1
    deltas = np.empty(total, np.int64)
    if total:
        deltas[0] = 0
        np.subtract(times[1:], times[:-1], out=deltas[1:])
        deltas[firsts] = times[firsts] - base[has]
    first, last = np.zeros(n, np.int64), np.zeros(n, np.int64)
    first[has], last[has] = times[firsts], times[lasts]
    return counts, _narrow(deltas, signed=True), _narrow(np.maximum(tokens, 0), signed=False), first, last


def _narrow(values: np.ndarray, *, signed: bool) -> np.ndarray:
    """``values`` in the smallest dtype of its kind (at least int32 / uint8) that holds them."""
    lo, hi = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    for dtype in (np.int32, np.int64) if signed else (np.uint8, np.uint16, np.uint32, np.uint64):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return values.astype(dtype)
    return values


def _skip(report: ReadReport | None, line: int) -> None:
    if report is not None:
        report.skipped_lines += 1
        report.first_skipped = report.first_skipped or line


def parsed_blocks(
    path: Path, start: int, end: int | None, report: ReadReport | None
) -> Iterator[tuple[list[dict[str, Any]], list[int]]]:
    """(records as dicts, their line numbers) of ``[start, end)``, about ``_READ_BYTES`` at a
    time; lines that are not records are counted in ``report`` here."""
    line = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        left = None if end is None else max(end - start, 0)
        tail = b""
        while True:
            size = _READ_BYTES if left is None else min(_READ_BYTES, left)
            data = fh.read(size) if size else b""
            if left is not None:
                left -= len(data)
            if data:
                data = tail + data
                cut = data.rfind(b"\n") + 1
                lines, tail = data[:cut].split(b"\n")[:-1], data[cut:]
            else:
                lines, tail = ([tail] if tail else []), b""
            rows, numbers = [], []
            for raw in lines:
                line += 1
                text = raw.strip()
                if not text:
                    continue
                try:
                    d = orjson.loads(text)
                except orjson.JSONDecodeError:
                    d = None
                if isinstance(d, dict) and d.keys() >= _REQUIRED:
                    rows.append(d)
                    numbers.append(line)
                else:
                    _skip(report, line)
            if rows:
                yield rows, numbers
            if not data:
                return
