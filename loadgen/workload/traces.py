"""Arrival traces for replay: Mooncake JSONL, the Azure LLM inference CSV, and loadgen's own JSONL.

A trace fixes when each request arrives and how long its prompt and answer are, so two servers
can be compared under the exact traffic production saw. Rows must already be in time order: a
replay tool that silently sorted would hide a broken export, so a row earlier than the one
before it is an error naming both lines. Errors name the file, line, field and fix. The
layouts, and what time_scale and the window mean: docs/workloads.md. Reading each layout's rows
is ``trace_files.py``'s (``TraceError`` is defined there and importable from here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from loadgen.workload.trace_files import BLOCK_TOKENS, JSONL_FIELDS, TraceError, read_azure, read_jsonl, sniff

__all__ = ["BLOCK_TOKENS", "Trace", "TraceError", "load_trace", "prefix_reuse"]


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
    kind = sniff(p, text) if fmt == "auto" else fmt
    if kind == "azure":
        times, inp, out, hashes = read_azure(p, text)
    elif kind in JSONL_FIELDS:
        times, inp, out, hashes = read_jsonl(p, text, kind)
    else:
        raise TraceError(f"trace format {fmt!r} is not one of 'auto', 'mooncake', 'azure', 'native'")
    return _window(p, kind, times, inp, out, hashes, time_scale, start_s, window_s)


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
