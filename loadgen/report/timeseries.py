"""Per-second views of a run, computed from the raw records (never from the summary).

Time is seconds since the first measured send (the start of the measured window). Warm-up
requests are left out. Bins are one second wide; the last one covers only what is left of
the window, and rates in it are divided by its true width, so a run that ends 0.3 s into a
bin does not show a false drop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from loadgen.records import RequestRecord

BIN_S = 1.0


def measured(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.warmup]


def window_ns(records: Sequence[RequestRecord]) -> tuple[int, int] | None:
    """(first send, last end) of the measured requests, as the summary's window defines it."""
    m = measured(records)
    if not m:
        return None
    start = min(r.t_send_ns for r in m)
    end = max(r.t_end_ns if r.t_end_ns is not None else r.t_send_ns for r in m)
    return start, end


def per_second(records: Sequence[RequestRecord]) -> pd.DataFrame:
    """One row per one-second bin of the measured window.

    Columns: ``t_s`` (bin start), ``width_s``, ``output_tokens_per_s`` (tokens of every
    chunk that arrived in the bin, ok or not, counted by ``chunk_tokens`` or one per chunk),
    ``in_flight`` (time-averaged number of requests between send and end, failed ones too),
    ``errors`` (failed or cancelled requests whose end falls in the bin).
    """
    cols = ("t_s", "width_s", "output_tokens_per_s", "in_flight", "errors")
    win = window_ns(records)
    if win is None or win[1] <= win[0]:
        return pd.DataFrame({c: np.empty(0) for c in cols})
    t0, t1 = win
    span_s = (t1 - t0) / 1e9
    n_bins = max(1, math.ceil(span_s / BIN_S))
    starts = np.arange(n_bins) * BIN_S
    widths = np.minimum(starts + BIN_S, span_s) - starts
    m = measured(records)

    times: list[int] = []
    tokens: list[int] = []
    for r in m:
        times.extend(r.chunk_times_ns)
        same = len(r.chunk_tokens) == len(r.chunk_times_ns)
        tokens.extend(max(n, 1) for n in r.chunk_tokens) if same else tokens.extend(
            [1] * len(r.chunk_times_ns)
        )
    tok = _bin_sum((np.asarray(times, np.int64) - t0) / 1e9, np.asarray(tokens, np.float64), n_bins)

    send = np.array([(r.t_send_ns - t0) / 1e9 for r in m])
    end = np.array([((r.t_end_ns if r.t_end_ns is not None else r.t_send_ns) - t0) / 1e9 for r in m])
    lo, hi = starts[:, None], (starts + widths)[:, None]
    overlap = np.clip(np.minimum(end[None, :], hi) - np.maximum(send[None, :], lo), 0, None).sum(axis=1)

    failed_end = np.array([e for r, e in zip(m, end) if not r.ok])
    errors = _bin_sum(failed_end, np.ones(len(failed_end)), n_bins)
    return pd.DataFrame(
        {
            "t_s": starts,
            "width_s": widths,
            "output_tokens_per_s": tok / widths,
            "in_flight": overlap / widths,
            "errors": errors.astype(np.int64),
        }
    )


def _bin_sum(t_s: np.ndarray, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """Sum of ``weights`` per one-second bin; an instant exactly at the window's end belongs
    to the last bin."""
    if t_s.size == 0:
        return np.zeros(n_bins)
    idx = np.clip(np.floor(t_s / BIN_S).astype(np.int64), 0, n_bins - 1)
    return np.bincount(idx, weights=weights, minlength=n_bins)[:n_bins]
