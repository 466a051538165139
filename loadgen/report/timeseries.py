"""Per-second views of a run, computed from the raw records (never from the summary).

They take a ``RecordTable`` or a list of records.

Time is seconds since the first measured send (the start of the measured window). Warm-up
requests are left out. Bins are one second wide; the last one covers only what is left of
the window, and rates in it are divided by its true width, so a run that ends 0.3 s into a
bin does not show a false drop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from loadgen.analysis.table import RecordTable, as_table
from loadgen.records import RequestRecord

if TYPE_CHECKING:
    import pandas as pd

BIN_S = 1.0
_BIN_NS = round(BIN_S * 1e9)

Records = RecordTable | Sequence[RequestRecord]


def measured(records: Records) -> RecordTable:
    """The measured (non-warm-up) rows."""
    t = as_table(records)
    return t.select(~t.column("warmup"))


def window_ns(records: Records) -> tuple[int, int] | None:
    """(first send, last end) of the measured requests, as the summary's window defines it."""
    t = as_table(records)
    keep = ~t.column("warmup")
    if not keep.any():
        return None
    send = t.column("t_send_ns")[keep]
    end, has_end = t.ints("t_end_ns")
    return int(send.min()), int(np.where(has_end[keep], end[keep], send).max())


def per_second(records: Records) -> pd.DataFrame:
    """``per_second_bins`` as a frame: one row per one-second bin of the measured window."""
    import pandas as pd  # here: the report draws these bins before it needs pandas (memory)

    return pd.DataFrame(per_second_bins(records))


def per_second_bins(records: Records) -> dict[str, np.ndarray]:
    """One value per one-second bin of the measured window, in each of these columns: ``t_s`` (bin
    start), ``width_s``, ``output_tokens_per_s`` (tokens of every chunk that arrived in the bin,
    ok or not, counted by ``chunk_tokens`` or one per chunk), ``in_flight`` (time-averaged
    number of requests between send and end, failed ones too), ``errors`` (failed or cancelled
    requests whose end falls in the bin). The chunks are walked a block at a time
    (``RecordTable.chunk_blocks``), and the time in flight is summed per bin in integer
    nanoseconds, exactly, in time proportional to requests plus bins.
    """
    cols = ("t_s", "width_s", "output_tokens_per_s", "in_flight", "errors")
    t = as_table(records)
    win = window_ns(t)
    if win is None or win[1] <= win[0]:
        return {c: np.empty(0) for c in cols}
    t0, t1 = win
    span_s = (t1 - t0) / 1e9
    n_bins = max(1, math.ceil(span_s / BIN_S))
    starts = np.arange(n_bins) * BIN_S
    widths = np.minimum(starts + BIN_S, span_s) - starts
    keep = ~t.column("warmup")

    tok = np.zeros(n_bins)
    for block in t.chunk_blocks(keep):
        weights = np.maximum(block.tokens, 1).astype(np.float64)
        tok += _bin_sum((block.times - t0) / 1e9, weights, n_bins)

    send = t.column("t_send_ns")[keep] - t0
    end_all, has_end = t.ints("t_end_ns")
    end = np.where(has_end[keep], end_all[keep] - t0, send)
    in_flight_ns = _time_in_bins(send, np.maximum(end, send), n_bins)

    failed_end = end[~t.column("ok")[keep]] / 1e9
    errors = _bin_sum(failed_end, np.ones(len(failed_end)), n_bins)
    return {
        "t_s": starts,
        "width_s": widths,
        "output_tokens_per_s": tok / widths,
        "in_flight": in_flight_ns / 1e9 / widths,
        "errors": errors.astype(np.int64),
    }


def _time_in_bins(start: np.ndarray, end: np.ndarray, n_bins: int) -> np.ndarray:
    """Per bin, the sum over intervals ``[start, end]`` (ns from the window's start, inside the
    window) of their overlap with the bin, as int64 ns: a partial first and last bin per
    interval, and every bin between them whole (a difference array)."""
    first = np.minimum(start // _BIN_NS, n_bins - 1)
    last = np.minimum(end // _BIN_NS, n_bins - 1)
    out = np.zeros(n_bins, np.int64)
    same = first == last
    np.add.at(out, first[same], end[same] - start[same])
    a, b, s, e = first[~same], last[~same], start[~same], end[~same]
    np.add.at(out, a, (a + 1) * _BIN_NS - s)
    np.add.at(out, b, e - b * _BIN_NS)
    whole = np.zeros(n_bins + 1, np.int64)
    np.add.at(whole, a + 1, 1)
    np.add.at(whole, b, -1)
    return out + np.cumsum(whole[:-1]) * _BIN_NS


def _bin_sum(t_s: np.ndarray, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """Sum of ``weights`` per one-second bin; an instant exactly at the window's end belongs
    to the last bin."""
    if t_s.size == 0:
        return np.zeros(n_bins)
    idx = np.clip(np.floor(t_s / BIN_S).astype(np.int64), 0, n_bins - 1)
    return np.bincount(idx, weights=weights, minlength=n_bins)[:n_bins]
