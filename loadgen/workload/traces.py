"""Arrival traces for replay: Mooncake JSONL, the Azure LLM inference CSV, and loadgen's own JSONL.

A trace fixes when each request arrives and how long its prompt and answer are, so two servers
can be compared under the exact traffic production saw. Rows must already be in time order: a
replay tool that silently sorted would hide a broken export, so a row earlier than the one
before it is an error naming both lines. Errors name the file, line, field and fix. The
layouts, and what time_scale and the window mean: docs/workloads.md.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

from loadgen.errors import LoadgenError

__all__ = ["BLOCK_TOKENS", "Trace", "TraceError", "load_trace", "prefix_reuse"]

BLOCK_TOKENS = 512  # tokens per Mooncake hash block; the last block of a prompt may be partial
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# (time, input length, output length) field names; the time is in milliseconds from trace start.
JSONL_FIELDS = {
    "mooncake": ("timestamp", "input_length", "output_length"),
    "native": ("timestamp_ms", "input_tokens", "output_tokens"),
}
# 2023 traces write "2023-11-16 18:15:46.6805900" (100 ns ticks), 2024 ones "... 00:00:00.001163+00:00".
_STAMP = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?\s*(?:(Z)|([+-])(\d\d):?(\d\d))?"
)
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()


class TraceError(LoadgenError, ValueError):
    """A trace file or replay setting that cannot be used; names the file, line, field and fix."""


@dataclass(frozen=True, eq=False)
class Trace:
    """The requests of a trace's window, ready to replay: offsets are scaled and start at 0."""

    offsets_ns: np.ndarray  # int64, sorted, first request at 0, time_scale already applied
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    hash_ids: tuple[tuple[int, ...], ...] | None  # per request, when the file gives them
    block_tokens: int  # tokens per hash block
    fmt: str  # "mooncake" | "azure" | "native"
    rows: int  # rows in the file, before the window
    span_s: float  # trace time from the window's first to its last request, before time_scale

    def __len__(self) -> int:
        return len(self.offsets_ns)


def load_trace(
    path: str | Path,
    fmt: Literal["auto", "mooncake", "azure", "native"] = "auto",
    *,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    window_s: float | None = None,
) -> Trace:
    """The rows with ``start_s <= t < start_s + window_s``, t in trace seconds from the first row.

    The window is cut in trace time, then re-origined at its first row, then multiplied by
    ``time_scale`` (2 replays the same requests over twice the time, at half the rate).
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise TraceError(f"time_scale is {time_scale}, expected a number > 0 (2 = twice as slow)")
    if not (math.isfinite(start_s) and start_s >= 0):
        raise TraceError(f"start_s is {start_s}, expected seconds >= 0 from the trace's first row")
    if window_s is not None and not (math.isfinite(window_s) and window_s > 0):
        raise TraceError(f"window_s is {window_s}, expected seconds > 0 (or none for the whole trace)")
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such file (give a local Mooncake .jsonl, Azure .csv or native .jsonl)")
    text = p.read_bytes().decode("utf-8-sig", errors="replace")
    if not text.strip():
        raise TraceError(f"{p}: the file is empty (expected one request a line)")
    kind = _sniff(p, text) if fmt == "auto" else fmt
    if kind == "azure":
        times, inp, out, hashes = _azure(p, text)
    elif kind in JSONL_FIELDS:
        times, inp, out, hashes = _jsonl(p, text, kind)
    else:
        raise TraceError(f"trace format {fmt!r} is not one of 'auto', 'mooncake', 'azure', 'native'")
    return _window(p, kind, times, inp, out, hashes, time_scale, start_s, window_s)


def _sniff(path: Path, text: str) -> str:
    # .csv is Azure; JSON lines tell Mooncake from native by their time field.
    if path.suffix.lower() == ".csv":
        return "azure"
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("TIMESTAMP"):
            return "azure"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "timestamp_ms" in obj:
            return "native"
        if isinstance(obj, dict) and "timestamp" in obj:
            return "mooncake"
        raise TraceError(
            f"{path} line {n}: cannot tell the layout; expected a Mooncake object with timestamp, a native "
            f"object with timestamp_ms, or the Azure CSV header {','.join(AZURE_HEADER)}"
        )
    raise AssertionError("unreachable: the text is not blank")


# (times in ns, input lengths, output lengths, hash_ids per row or None), one entry per row.
_Rows = tuple[list[int], list[int], list[int], list[tuple[int, ...]] | None]


def _jsonl(path: Path, text: str, kind: str) -> _Rows:
    t_key, in_key, out_key = JSONL_FIELDS[kind]
    times: list[int] = []
    inp: list[int] = []
    out: list[int] = []
    hashes: list[tuple[int, ...]] = []
    lines: list[int] = []  # the line of each row, for the order check and the hash_ids rule
    # Split on newlines only, as editors count lines (str.splitlines also splits on U+2028 ...).
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise TraceError(f"{path} line {n}: not valid JSON ({e}); expected one object a line") from None
        if not isinstance(obj, dict):
            raise TraceError(f'{path} line {n}: the line is not an object, expected {{"{t_key}": ...}}')
        ms = obj.get(t_key)
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not (math.isfinite(ms) and ms >= 0):
            got = "missing" if t_key not in obj else repr(ms)
            raise TraceError(
                f"{path} line {n}: {t_key} is {got}, expected milliseconds >= 0 from trace start"
            )
        t = ms * 1_000_000 if isinstance(ms, int) else round(ms * 1e6)
        _in_order(path, n, t, times, lines, t_key)
        inp.append(_length(path, n, obj, in_key))
        out.append(_length(path, n, obj, out_key))
        times.append(t)
        lines.append(n)
        has = "hash_ids" in obj
        if len(times) > 1 and has != bool(hashes):  # the first row decides for the file
            raise TraceError(
                f"{path} line {n}: hash_ids is {'given' if has else 'missing'}, but line {lines[0]} "
                f"{'has none' if has else 'has them'}; give hash_ids on every line or on none"
            )
        if has:
            hashes.append(_hash_ids(path, n, obj["hash_ids"], inp[-1], in_key))
    if not times:
        raise TraceError(f"{path}: no requests (only blank lines)")
    return times, inp, out, (hashes or None)


def _in_order(path: Path, n: int, t: int, times: list[int], lines: list[int], field: str) -> None:
    if times and t < times[-1]:
        raise TraceError(
            f"{path} line {n}: {field} goes back in time (earlier than line {lines[-1]}); "
            "a trace must be in time order: sort it by time first"
        )


def _length(path: Path, n: int, obj: dict[str, Any], key: str) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        got = "missing" if key not in obj else repr(v)
        raise TraceError(f"{path} line {n}: {key} is {got}, expected a whole number of tokens >= 0")
    return v


def _hash_ids(path: Path, n: int, ids: Any, length: int, in_key: str) -> tuple[int, ...]:
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in ids):
        raise TraceError(f"{path} line {n}: hash_ids is {ids!r:.60}, expected a list of integers")
    want = -(-length // BLOCK_TOKENS)
    if len(ids) != want:
        raise TraceError(
            f"{path} line {n}: hash_ids has {len(ids)} ids, expected ceil({in_key} / {BLOCK_TOKENS}) = "
            f"{want} for {in_key} {length} (one id per {BLOCK_TOKENS}-token block, the last one partial)"
        )
    return tuple(ids)


def _azure(path: Path, text: str) -> _Rows:
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    if tuple(h.strip() for h in header) != AZURE_HEADER:
        raise TraceError(
            f"{path} line 1: header is {','.join(header)!r}, expected {','.join(AZURE_HEADER)} "
            "(the Azure LLM inference trace layout)"
        )
    times: list[int] = []
    inp: list[int] = []
    out: list[int] = []
    lines: list[int] = []
    for row in reader:
        n = reader.line_num
        if not row or not "".join(row).strip():
            continue
        if len(row) != 3:
            raise TraceError(
                f"{path} line {n}: the row has {len(row)} fields, expected 3 ({','.join(AZURE_HEADER)})"
            )
        t = _stamp_ns(row[0])
        if t is None:
            raise TraceError(
                f"{path} line {n}: TIMESTAMP is {row[0]!r}, "
                "expected a date and time like 2023-11-16 18:15:46.6805900"
            )
        _in_order(path, n, t, times, lines, "TIMESTAMP")
        for key, value, dest in (("ContextTokens", row[1], inp), ("GeneratedTokens", row[2], out)):
            v = value.strip()
            if not (v.isascii() and v.isdigit()):
                raise TraceError(
                    f"{path} line {n}: {key} is {value!r}, expected a whole number of tokens >= 0"
                )
            dest.append(int(v))
        times.append(t)
        lines.append(n)
    if not times:
        raise TraceError(f"{path}: no requests after the header")
    return times, inp, out, None


def _stamp_ns(text: str) -> int | None:
    """Nanoseconds since 1970 (UTC unless an offset is given), exact: no float in the way."""
    m = _STAMP.fullmatch(text.strip())
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    try:
        day = dt.date(y, mo, d).toordinal() - _EPOCH_DAY
        dt.time(h, mi, s)
    except ValueError:
        return None
    secs = day * 86400 + h * 3600 + mi * 60 + s
    if m[9]:
        sign = -1 if m[9] == "-" else 1
        secs -= sign * (int(m[10]) * 3600 + int(m[11]) * 60)
    return secs * 1_000_000_000 + int((m[7] or "0").ljust(9, "0"))


def _window(
    path: Path,
    kind: str,
    times: list[int],
    inp: list[int],
    out: list[int],
    hashes: list[tuple[int, ...]] | None,
    time_scale: float,
    start_s: float,
    window_s: float | None,
) -> Trace:
    rel = np.asarray(times, dtype=np.int64) - times[0]
    lo = int(np.searchsorted(rel, round(start_s * 1e9), side="left"))
    hi = (
        len(rel) if window_s is None else int(np.searchsorted(rel, round((start_s + window_s) * 1e9), "left"))
    )
    if lo >= hi:
        end = "the end" if window_s is None else f"{start_s + window_s:g} s"
        raise TraceError(
            f"{path}: no requests from {start_s:g} s to {end}; the trace spans 0 to {rel[-1] / 1e9:.3f} s "
            f"({len(rel)} rows): move start_s or widen window_s"
        )
    offsets = rel[lo:hi] - rel[lo]
    if time_scale != 1.0:
        offsets = np.rint(offsets * time_scale).astype(np.int64)
    return Trace(
        offsets_ns=offsets,
        input_tokens=np.asarray(inp[lo:hi], dtype=np.int64),
        output_tokens=np.asarray(out[lo:hi], dtype=np.int64),
        hash_ids=None if hashes is None else tuple(hashes[lo:hi]),
        block_tokens=BLOCK_TOKENS,
        fmt=kind,
        rows=len(rel),
        span_s=float(rel[hi - 1] - rel[lo]) / 1e9,
    )


def prefix_reuse(trace: Trace) -> float:
    """The fraction of input tokens an unbounded prefix cache could serve, in trace order.

    A request's hit is its longest leading run of hash_ids that is also the leading run of some
    earlier request (a prefix cache only matches from the start); it covers min(run * block,
    input) tokens. The sum of hits over the sum of input tokens; capacity and eviction ignored.
    """
    if trace.hash_ids is None:
        raise TraceError(f"prefix_reuse needs hash_ids, and this {trace.fmt} trace has none")
    children: dict[tuple[int, int], int] = {}  # (node, hash id) -> node: a trie of seen prefixes
    hit_tokens = 0
    for ids, length in zip(trace.hash_ids, trace.input_tokens.tolist()):
        node, run = 0, 0
        for h in ids:
            nxt = children.get((node, h))
            if nxt is None:
                break
            node, run = nxt, run + 1
        hit_tokens += min(run * trace.block_tokens, length)
        for h in ids[run:]:
            children[(node, h)] = node = len(children) + 1
    total = int(trace.input_tokens.sum())
    return hit_tokens / total if total else 0.0
