"""Records -> per-request columns -> run summary (docs/metrics.md).

Warm-up requests are excluded from every statistic; failed and cancelled requests are never
dropped: they appear in the counts, the error rate, the in-flight concurrency and goodput's
attained fraction, but not in the latency distributions (which cover ok requests only).
Everything returned by ``summarize``/``distribution``/``client_limits`` is plain JSON:
python ints, floats and None (never NaN).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from loadgen import metric_defs
from loadgen.analysis import sla as sla_mod
from loadgen.metric_defs import PERCENTILES, STATS
from loadgen.records import CANCELLED, RequestRecord

# Raw record fields that are scalars (list fields such as chunk_times_ns are not columns).
SCALAR_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(RequestRecord) if f.default_factory is not list
)
_NULLABLE_INT = frozenset(
    f.name for f in dataclasses.fields(RequestRecord) if str(f.type).replace(" ", "") == "int|None"
)
# The columns request_frame derives, in its order: the per-request distributions of the registry.
DERIVED_COLUMNS: tuple[str, ...] = (
    "ttft_ms",
    "ttfb_ms",
    "e2e_ms",
    "tpot_ms",
    "client_lag_ms",
    "ttft_from_sched_ms",
    "e2e_from_sched_ms",
)
# The registry's gap-sample kinds, in the order itl_values returns them.
GAP_SAMPLES: tuple[str, ...] = ("chunk_gaps", "token_gaps")


def distribution(values: Any) -> dict:
    """Summary statistics of ``values`` as a JSON-ready dict with the keys of ``STATS``.

    NaN values are dropped first (a column's "undefined for this request"). Percentiles use
    numpy's default linear interpolation between closest ranks (``np.percentile(...,
    method="linear")``: p50 of 1..100 is 50.5, p99 is 99.01); ``std`` is the population
    standard deviation (ddof=0). No values: ``count`` 0 and ``None`` for every other stat.
    """
    arr = np.asarray(values, dtype=np.float64).ravel()
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return {"count": 0, **{k: None for k in STATS[1:]}}
    pct = np.percentile(arr, list(PERCENTILES.values()), method="linear")
    out = {
        "count": int(arr.size),
        "mean": _float(arr.mean()),
        "std": _float(arr.std()),
        "min": _float(arr.min()),
    }
    out.update({k: _float(v) for k, v in zip(PERCENTILES, pct)})
    out["max"] = _float(arr.max())
    return out


def request_frame(records: Sequence[RequestRecord]) -> pd.DataFrame:
    """One row per record: every scalar record field, plus derived latencies in ms.

    Nullable integer fields (``t_end_ns``, ``output_tokens``, ...) are pandas ``Int64`` so
    nanosecond timestamps keep full precision. Derived columns (float ms, NaN = undefined):
    ``ttft_ms`` / ``ttfb_ms``: first content chunk / first byte minus ``t_send`` wherever the
    timestamp exists (a failed request that streamed a while keeps its TTFT; filter on ``ok``);
    ``e2e_ms``: ``t_end - t_send`` for ok requests only (for a failure it would be time to
    failure, not latency); ``tpot_ms``: ``(last chunk - first token) / (output_tokens - 1)``
    for ok requests with ``output_tokens >= 2``; ``client_lag_ms``: ``t_send - t_sched``;
    ``ttft_from_sched_ms`` / ``e2e_from_sched_ms``: TTFT and E2E from ``t_sched`` instead of
    ``t_send`` (the same requests; each is its send-based twin plus ``client_lag_ms``).
    """
    cols: dict[str, Any] = {}
    for name in SCALAR_FIELDS:
        raw = [getattr(r, name) for r in records]
        cols[name] = _nullable_int(raw) if name in _NULLABLE_INT else raw
    frame = pd.DataFrame(cols)
    for name in (
        "id",
        "t_sched_ns",
        "t_send_ns",
        "requested_output_tokens",
        "requested_prompt_tokens",
        "worker",
        "stage",
    ):
        frame[name] = frame[name].astype(np.int64)
    frame["ok"] = frame["ok"].astype(bool)
    frame["warmup"] = frame["warmup"].astype(bool)

    send = frame["t_send_ns"].to_numpy()
    sched = frame["t_sched_ns"].to_numpy()
    ok = frame["ok"].to_numpy()
    first, has_first = _ints(frame["t_first_token_ns"])
    byte, has_byte = _ints(frame["t_first_byte_ns"])
    end, has_end = _ints(frame["t_end_ns"])
    out, has_out = _ints(frame["output_tokens"])
    last_raw = [r.chunk_times_ns[-1] if r.chunk_times_ns else None for r in records]
    last, has_last = _ints(_nullable_int(last_raw))

    frame["ttft_ms"] = np.where(has_first, (first - send) / 1e6, np.nan)
    frame["ttfb_ms"] = np.where(has_byte, (byte - send) / 1e6, np.nan)
    frame["e2e_ms"] = np.where(ok & has_end, (end - send) / 1e6, np.nan)
    tpot_ok = ok & has_first & has_last & has_out & (out >= 2)
    frame["tpot_ms"] = np.where(tpot_ok, (last - first) / 1e6 / np.maximum(out - 1, 1), np.nan)
    frame["client_lag_ms"] = (send - sched) / 1e6
    frame["ttft_from_sched_ms"] = np.where(has_first, (first - sched) / 1e6, np.nan)
    frame["e2e_from_sched_ms"] = np.where(ok & has_end, (end - sched) / 1e6, np.nan)
    return frame


def itl_values(records: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token latencies in ms, pooled over ok, non-warm-up requests: ``(itl, per_token)``.

    ``itl``: one sample per gap between consecutive content chunks of a request
    (``diff(chunk_times_ns)``), however many tokens the later chunk carried.
    ``per_token``: token-weighted; a gap ``g`` whose later chunk carried ``n`` tokens
    (``chunk_tokens[i]``) contributes ``n`` samples of ``g / n``. So chunks at 0, 10, 20 ms
    carrying [1, 1, 3] tokens give ``itl`` = [10, 10] and ``per_token`` = [10, 3.33, 3.33,
    3.33]. The first chunk's tokens have no gap (that is TTFT). A chunk counted as 0 tokens
    is treated as 1; a request whose ``chunk_tokens`` does not match its chunks counts one
    token per chunk.
    """
    eligible = [r for r in records if r.ok and not r.warmup and len(r.chunk_times_ns) >= 2]
    if not eligible:
        empty = np.empty(0, dtype=np.float64)
        return empty, empty.copy()
    lengths = np.fromiter((len(r.chunk_times_ns) for r in eligible), np.int64, len(eligible))
    total = int(lengths.sum())
    times = np.fromiter(itertools.chain.from_iterable(r.chunk_times_ns for r in eligible), np.int64, total)
    tokens = np.fromiter(
        itertools.chain.from_iterable(
            r.chunk_tokens
            if len(r.chunk_tokens) == len(r.chunk_times_ns)
            else itertools.repeat(1, len(r.chunk_times_ns))
            for r in eligible
        ),
        np.int64,
        total,
    )
    keep = np.ones(total - 1, dtype=bool)
    keep[np.cumsum(lengths)[:-1] - 1] = False  # the "gap" from one request's last chunk to the next's first
    itl = np.diff(times)[keep] / 1e6
    n = np.maximum(tokens[1:][keep], 1)
    return itl, np.repeat(itl / n, n)


def distribution_samples(
    records: Sequence[RequestRecord], frame: pd.DataFrame | None = None
) -> dict[str, np.ndarray]:
    """{metric: the values its distribution summarizes (ms)} for every distribution of the
    registry, in its order, as its ``samples`` says: a ``request_frame`` column over ok or all
    measured requests, or the chunk gaps of ``itl_values``. Warm-up excluded; may hold NaN.
    ``frame``: ``request_frame(records)`` when already built."""
    frame = request_frame(records) if frame is None else frame
    measured = frame[~frame["warmup"].to_numpy()]
    rows = {"measured_requests": measured, "ok_requests": measured[measured["ok"].to_numpy()]}
    gaps = dict(zip(GAP_SAMPLES, itl_values(records)))
    out: dict[str, np.ndarray] = {}
    for d in metric_defs.DISTRIBUTIONS:
        kind = d.samples
        if kind in gaps:
            out[d.name] = gaps[kind]
        else:
            assert kind is not None, f"distribution {d.name} names no samples"  # metric_defs._dist sets it
            out[d.name] = rows[kind][d.name].to_numpy()
    return out


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


def summarize(records: Sequence[RequestRecord], *, sla: Any = None) -> dict:
    """The run summary: ``{"counts", "window", "metrics", "sla"}`` (see docs/design.md, "Result files").

    counts cover measured (non-warm-up) requests: ``sent``, ``ok``, ``failed`` (not ok, not
    cancelled), ``cancelled``, ``warmup`` (excluded everywhere else), ``errors_by_class`` (every
    non-ok request incl. cancelled; no class -> "unknown"; by count desc, then name) and
    ``error_rate = failed / (ok + failed)``.
    The window runs from the first measured ``t_send`` to the last measured ``t_end`` (or
    ``t_send`` where a request has no ``t_end``); every rate is per second of that window.
    ``mean_concurrency`` is the time-averaged in-flight count over the whole window.
    Little's law (L = lambda x W) is checked on the dispatch window, first to last measured send,
    where the load is applied and ramp-down is excluded: ``measured_concurrency`` is the in-flight
    average there, ``expected_concurrency`` = completions inside it per second x mean latency
    (``t_end - t_send``, every finished request). Over the whole window the two sides would be
    the same sum divided twice, equal by construction; on the dispatch window they agree only
    when the run was in a steady state, so a ratio far from 1 flags a run too short or too
    unsteady for its averages to describe it.
    """
    frame = request_frame(records)
    m = frame[~frame["warmup"].to_numpy()]
    ok = m["ok"].to_numpy()
    cancelled = ~ok & (m["error_class"] == CANCELLED).to_numpy()
    failed = ~ok & ~cancelled
    n_ok, n_failed = int(ok.sum()), int(failed.sum())

    errors = m.loc[~ok, "error_class"].fillna("unknown").value_counts()
    counts = {
        "sent": len(m),
        "ok": n_ok,
        "failed": n_failed,
        "cancelled": int(cancelled.sum()),
        "warmup": int(len(frame) - len(m)),
        "errors_by_class": {k: int(v) for k, v in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))},
        "error_rate": _ratio(n_failed, n_ok + n_failed),
        # A stream that ended normally without a single token is "ok" to HTTP but not an answer:
        # counted apart, so it never passes for a fast response unnoticed.
        "anomalies": {"zero_output_tokens": int((ok & (m["output_tokens"].fillna(0).to_numpy() == 0)).sum())},
        # The server asked the client to back off (429/503 with Retry-After): how often, how long.
        "retry_after": _retry_after(m["retry_after_s"]),
    }

    send = m["t_send_ns"].to_numpy()
    end, has_end = _ints(m["t_end_ns"])
    end = np.where(has_end, end, send)
    start_ns: int | None = None
    end_ns: int | None = None
    seconds = 0.0
    if len(m):
        start_ns, end_ns = int(send.min()), int(end.max())
        seconds = (end_ns - start_ns) / 1e9
    window = {"start_ns": start_ns, "end_ns": end_ns, "seconds": seconds}

    def rate(x: float) -> float | None:
        return float(x / seconds) if seconds > 0 else None

    okf = m[ok]
    samples = distribution_samples(records, frame)
    metrics: dict[str, Any] = {d.name: distribution(samples[d.name]) for d in metric_defs.DISTRIBUTIONS}

    in_tokens = int(okf["prompt_tokens"].fillna(0).sum())
    out_tokens_each = okf["output_tokens"].fillna(0).to_numpy(dtype=np.int64)
    metrics["request_throughput_rps"] = rate(n_ok)
    metrics["input_tokens_per_s"] = rate(in_tokens)
    metrics["output_tokens_per_s"] = rate(int(out_tokens_each.sum()))
    metrics["total_tokens_per_s"] = rate(in_tokens + int(out_tokens_each.sum()))

    measured_conc = (
        mean_concurrency(send, end, start_ns, end_ns) if start_ns is not None and end_ns is not None else None
    )
    metrics["mean_concurrency"] = measured_conc
    metrics["littles_law"] = _littles_law(send, end, has_end)

    slos = sla_mod.set_slos(sla)
    good = sla_mod.good_mask(ok, {k: m[k].to_numpy() for k in slos}, slos)
    out_all = m["output_tokens"].fillna(0).to_numpy(dtype=np.int64)
    metrics["goodput"] = {
        "requests_per_s": rate(int(good.sum())),
        "output_tokens_per_s": rate(int(out_all[good].sum())),
        "attained_fraction": _ratio(int(good.sum()), n_ok + n_failed),
    }
    reasoning = _reasoning(records)
    if reasoning is not None:
        metrics["reasoning"] = reasoning
    metrics["token_count_source"] = _value_counts(okf["token_source"])
    metrics["prompt_tokens_source"] = _value_counts(okf["prompt_tokens_source"])

    summary = {"counts": counts, "window": window, "metrics": metrics}
    summary["sla"] = sla_mod.evaluate(sla, summary)
    return summary


def _retry_after(column: pd.Series) -> dict:
    values = pd.to_numeric(column, errors="coerce").dropna()
    return {"requests": len(values), "max_s": float(values.max()) if len(values) else None}


def _littles_law(send: np.ndarray, end: np.ndarray, has_end: np.ndarray) -> dict:
    out: dict[str, float | None] = {
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
    out.update(
        window_seconds=span / 1e9,
        expected_concurrency=expected,
        measured_concurrency=measured,
        ratio=_ratio(measured, expected),
    )
    return out


def client_limits(records: Sequence[RequestRecord], *, lag_threshold_ms: float = 10.0) -> dict | None:
    """A "client_limited" warning when p99 send lag (``t_send - t_sched``) of measured
    requests exceeds ``lag_threshold_ms``: then the client, not the server, set the pace."""
    lag = np.fromiter(((r.t_send_ns - r.t_sched_ns) / 1e6 for r in records if not r.warmup), np.float64)
    if lag.size == 0:
        return None
    p99 = float(np.percentile(lag, 99.0))
    if p99 <= lag_threshold_ms:
        return None
    late = float((lag > lag_threshold_ms).mean())
    return {
        "warning": "client_limited",
        "client_lag_p99_ms": p99,
        "client_lag_max_ms": float(lag.max()),
        "late_fraction": late,
        "message": (
            f"p99 client send lag is {p99:.1f} ms (threshold {lag_threshold_ms:g} ms; "
            f"{late:.1%} of requests went out late): the load generator, not the server, "
            "limited this run; use more worker processes or a lower rate."
        ),
    }


def _reasoning(records: Sequence[RequestRecord]) -> dict | None:
    """Time to first reasoning token (ms) over ok measured requests that streamed reasoning."""
    with_reasoning = [r for r in records if not r.warmup and r.reasoning_times_ns]
    if not with_reasoning:
        return None
    ttfr = [(r.reasoning_times_ns[0] - r.t_send_ns) / 1e6 for r in with_reasoning if r.ok]
    return {"requests": len(with_reasoning), "ttfr_ms": distribution(ttfr)}


def _nullable_int(values: Sequence[int | None]) -> pd.arrays.IntegerArray:
    data = np.array(values, dtype=object)
    mask = np.array([v is None for v in values], dtype=bool)
    data[mask] = 0
    return pd.arrays.IntegerArray(data.astype(np.int64), mask)


def _ints(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with 0 for missing, present-mask) of a nullable integer column."""
    arr = column.array if isinstance(column, pd.Series) else column
    return arr.to_numpy(dtype=np.int64, na_value=0), ~np.asarray(arr.isna(), dtype=bool)


def _value_counts(column: pd.Series) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(column.value_counts().items())}


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return float(num / den)


def _float(x: Any) -> float | None:
    x = float(x)
    return None if np.isnan(x) or np.isinf(x) else x
