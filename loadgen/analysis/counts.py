"""The accounting of a run's requests: its ``counts`` block, its measured ``window``, the requests
in flight over it and Little's law on it.

Why apart from ``metrics``: these read only the records' scalar columns (no latency formula, no
inter-token gap), and the over-saturation verdict, the curve and the summary all lean on them.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from loadgen.analysis.table import RecordTable
from loadgen.backends.rejections import hint
from loadgen.records import CANCELLED, END_OF_BODY, NO_TERMINATOR, TERMINATOR
from loadgen.summary import Counts, Window
from loadgen.summary.measures import CountsStreamEnds, ErrorSample, MetricsLittlesLaw

SAMPLE_CHARS = 200  # of a server's error message kept as its class's sample


def counts_block(table: RecordTable, keep: np.ndarray) -> Counts:
    """The ``counts`` block over the measured requests ``keep`` (warm-up excluded): ``sent``,
    ``ok``, ``failed`` (not ok, not cancelled), ``cancelled``, ``warmup`` (excluded everywhere
    else), ``errors_by_class`` (every non-ok request incl. cancelled; no class -> "unknown"; by
    count desc, then name) and ``error_rate = failed / (ok + failed)``."""
    ok = table.column("ok")[keep]
    errors_col = table.column("error_class")[keep]
    cancelled = ~ok & (errors_col == CANCELLED)
    failed = ~ok & ~cancelled
    n_ok, n_failed = int(ok.sum()), int(failed.sum())
    out_all = filled(table, "output_tokens")[keep]
    pooled = table.present("items")[keep]  # a pooling answer (embeddings, rerank) has no output
    errors = Counter("unknown" if e is None else e for e in errors_col[~ok].tolist())
    retried = table.column("attempts")[keep] > 1
    why = Counter(str(r) for r in table.column("retry_reason")[keep][retried].tolist())
    backoff = table.column("retry_after_s")[keep]
    backoff = backoff[~np.isnan(backoff)]
    return {
        "sent": int(keep.sum()),
        "ok": n_ok,
        "failed": n_failed,
        "cancelled": int(cancelled.sum()),
        "warmup": int(len(table) - keep.sum()),
        "errors_by_class": {k: int(v) for k, v in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))},
        "error_rate": ratio(n_failed, n_ok + n_failed),
        # A stream that ended normally without a single token is "ok" to HTTP but not an answer:
        # counted apart, so it never passes for a fast response unnoticed.
        "anomalies": {"zero_output_tokens": int((ok & (out_all == 0) & ~pooled).sum())},
        # The server asked the client to back off (429/503 with Retry-After): how often, how long.
        "retry_after": {"requests": len(backoff), "max_s": float(backoff.max()) if len(backoff) else None},
        # Requests sent a second time because the reused connection they first went out on
        # ended before any byte of the answer (the only retry loadgen makes): the server saw
        # them twice, so they are counted, never hidden.
        "retries": {"requests": int(retried.sum()), "by_reason": dict(sorted(why.items()))},
        "error_samples": error_samples(table, keep, ok),
        "stream_ends": stream_ends(table, keep, ok),
    }


def error_samples(table: RecordTable, keep: np.ndarray, ok: np.ndarray) -> dict[str, ErrorSample]:
    """The first message of each error class among the measured failures (cancelled left out:
    loadgen's own words), with the fix when the refusal is a known one (``rejections``), so
    the server's reason is shown where the user looks, not only in requests.jsonl."""
    classes = table.column("error_class")[keep][~ok].tolist()
    messages = table.column("error_message")[keep][~ok].tolist()
    out: dict[str, ErrorSample] = {}
    for cls, msg in zip(classes, messages):
        cls = "unknown" if cls is None else cls
        if cls in out or cls == CANCELLED:
            continue
        text = " ".join(str(msg).split())[:SAMPLE_CHARS] if msg else None
        out[cls] = {"message": text, "hint": hint(cls, text)}
    return out


def stream_ends(table: RecordTable, keep: np.ndarray, ok: np.ndarray) -> CountsStreamEnds:
    """How the ok measured streams ended (records without a ``stream_end``, answers given whole,
    count in none)."""
    ends = Counter(table.column("stream_end")[keep][ok].tolist())
    return {
        "terminator": ends[TERMINATOR],
        "no_terminator": ends[NO_TERMINATOR],
        "end_of_body": ends[END_OF_BODY],
    }


def spans(table: RecordTable, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send, end, has_end) of the requests ``keep``; a request with no end ends at its send."""
    send = table.column("t_send_ns")[keep]
    end_all, has_end_all = table.ints("t_end_ns")
    has_end = has_end_all[keep]
    return send, np.where(has_end, end_all[keep], send), has_end


def window_block(send: np.ndarray, end: np.ndarray) -> Window:
    """The measured window: the first measured ``t_send`` to the last measured end; every rate is
    per second of it."""
    if not len(send):
        return {"start_ns": None, "end_ns": None, "seconds": 0.0}
    start_ns, end_ns = int(send.min()), int(end.max())
    return {"start_ns": start_ns, "end_ns": end_ns, "seconds": (end_ns - start_ns) / 1e9}


def mean_concurrency(
    starts_ns: np.ndarray, ends_ns: np.ndarray, window_start_ns: int, window_end_ns: int
) -> float | None:
    """Time-averaged number of requests in flight over ``[window_start, window_end]``.

    The integral of the in-flight count over the window equals the sum of each interval's
    overlap with the window, so this is the event sweep's exact result without sorting.
    """
    span = window_end_ns - window_start_ns
    if span <= 0:
        return None
    overlap = np.minimum(ends_ns, window_end_ns) - np.maximum(starts_ns, window_start_ns)
    return float(np.clip(overlap, 0, None).sum() / span)


def littles_law(send: np.ndarray, end: np.ndarray, has_end: np.ndarray) -> MetricsLittlesLaw:
    """Little's law (L = lambda x W) on the dispatch window, first to last measured send, where
    the load is applied and ramp-down is excluded: ``measured_concurrency`` is the in-flight
    average there, ``expected_concurrency`` = completions inside it per second x mean latency
    (``t_end - t_send``, every finished request). Over the whole window the two sides would be
    the same sum divided twice, equal by construction; on the dispatch window they agree only
    when the run was in a steady state, so a ratio far from 1 flags a run too short or too
    unsteady for its averages to describe it."""
    out: MetricsLittlesLaw = {
        "window_seconds": None,
        "expected_concurrency": None,
        "measured_concurrency": None,
        "ratio": None,
    }
    if len(send) < 2:
        return out
    ds, de = int(send.min()), int(send.max())
    span = de - ds
    if span <= 0 or not has_end.any():
        return out
    measured = mean_concurrency(send, end, ds, de)
    done = has_end & (end >= ds) & (end <= de)
    latency_s = float((end[has_end] - send[has_end]).mean()) / 1e9
    expected = float(done.sum()) / (span / 1e9) * latency_s
    return {
        "window_seconds": span / 1e9,
        "expected_concurrency": expected,
        "measured_concurrency": measured,
        "ratio": ratio(measured, expected),
    }


def filled(table: RecordTable, name: str) -> np.ndarray:
    """A nullable int column with 0 where missing (``fillna(0)``)."""
    values, present = table.ints(name)
    return np.where(present, values, 0)


def ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return float(num / den)


def value_counts(column: np.ndarray) -> dict[str, int]:
    counts = Counter(v for v in column.tolist() if v is not None)
    return {str(k): int(v) for k, v in sorted(counts.items())}
