"""Records -> per-request columns -> run summary (docs/metrics.md).

Warm-up requests are excluded from every statistic; failed and cancelled requests are never
dropped: they appear in the counts, the error rate, the in-flight concurrency and goodput's
attained fraction, but not in the latency distributions (which cover ok requests only).
Everything returned by ``summarize``/``distribution``/``client_limits`` is plain JSON:
python ints, floats and None (never NaN).

Every function that takes records takes a ``RecordTable`` (``analysis.table``: a run's records as
columns, a few bytes a chunk) or a sequence of ``RequestRecord`` (turned into one by
``as_table``), and computes from columns: a long run's summary never holds its records, nor its
inter-token gaps as floats (``analysis.gaps``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from loadgen import metric_defs
from loadgen.analysis import sla as sla_mod
from loadgen.analysis.counts import (
    counts_block,
    filled,
    littles_law,
    mean_concurrency,
    ratio,
    spans,
    value_counts,
    window_block,
)
from loadgen.analysis.distribution import distribution
from loadgen.analysis.gaps import GapSamples
from loadgen.analysis.server_timings import server_timings
from loadgen.analysis.table import KINDS, NULLABLE_BOOLS, SCALAR_FIELDS, RecordTable, as_table
from loadgen.records import RequestRecord
from loadgen.summary import Counts, Metrics, Window
from loadgen.summary.measures import Measured

if TYPE_CHECKING:  # pandas is imported by request_frame alone: the summary never needs it
    import pandas as pd

__all__ = [
    "DERIVED_COLUMNS",
    "GAP_SAMPLES",
    "SCALAR_FIELDS",
    "Records",
    "as_table",
    "client_limits",
    "distribution",
    "distribution_samples",
    "itl_values",
    "request_frame",
    "summarize",
]

# What the functions below take: a table, or records (SCALAR_FIELDS: the record fields that are
# scalars; list fields such as chunk_times_ns are not columns).
Records = RecordTable | Sequence[RequestRecord]
# The columns request_frame derives, in its order: the per-request distributions of the registry.
DERIVED_COLUMNS: tuple[str, ...] = tuple(d.name for d in metric_defs.PER_REQUEST)
# The registry's gap-sample kinds, in the order itl_values returns them.
GAP_SAMPLES: tuple[str, ...] = ("chunk_gaps", "token_gaps")


def request_frame(records: Records) -> pd.DataFrame:
    """One row per record: every scalar record field, plus derived latencies in ms.

    Nullable integer fields (``t_end_ns``, ``output_tokens``, ...) are pandas ``Int64`` so
    nanosecond timestamps keep full precision. Derived columns (float ms, NaN = undefined):
    the registry's per-request distributions (``DERIVED_COLUMNS``), each its entry's ``formula``:
    ``ttft_ms`` / ``ttfb_ms``: first content chunk / first byte minus ``t_send`` wherever the
    timestamp exists (a failed request that streamed a while keeps its TTFT; filter on ``ok``);
    ``e2e_ms``: ``t_end - t_send`` for ok requests only (for a failure it would be time to
    failure, not latency); ``tpot_ms``: ``(last chunk - first token) / (output_tokens - 1)``
    for ok requests with ``output_tokens >= 2``; ``client_lag_ms``: ``t_send - t_sched``;
    ``ttft_from_sched_ms`` / ``e2e_from_sched_ms``: TTFT and E2E from ``t_sched`` instead of
    ``t_send`` (the same requests; each is its send-based twin plus ``client_lag_ms``).
    """
    import pandas as pd  # here, not at the top: a run's summary needs no pandas (memory, start-up)

    t = as_table(records)
    cols: dict[str, Any] = {}
    for name in SCALAR_FIELDS:
        kind, values = KINDS[name], t.column(name)
        if kind == "nint":  # pandas Int64: nanosecond timestamps keep full precision
            cols[name] = pd.arrays.IntegerArray(values, ~t.present(name))
        elif name in NULLABLE_BOOLS:  # pandas boolean: True, False or <NA> (not scored)
            cols[name] = pd.arrays.BooleanArray(values == 1.0, np.isnan(values))
        elif kind == "str":  # a list, so pandas infers the dtype it always did (str, or object)
            cols[name] = values.tolist()
        elif kind == "float" and np.isnan(values).all():  # all missing: object, as from a list
            cols[name] = np.full(len(values), None, dtype=object)
        else:
            cols[name] = values
    frame = pd.DataFrame(cols)
    for name, values in derived_columns(t).items():
        frame[name] = values
    return frame


def derived_columns(records: Records) -> dict[str, np.ndarray]:
    """``request_frame``'s derived columns (``DERIVED_COLUMNS``) as float64 arrays, one value per
    row: what the summary reads, without building a frame of the run."""
    t = as_table(records)
    out = {}
    for d in metric_defs.PER_REQUEST:
        assert d.formula is not None, f"per-request distribution {d.name} has no formula"
        out[d.name] = d.formula(t)
    return out


def itl_values(records: Records) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token latencies in ms, pooled over ok, non-warm-up requests: ``(itl, per_token)``.

    ``itl``: one sample per gap between consecutive content chunks of a request
    (``diff(chunk_times_ns)``), however many tokens the later chunk carried.
    ``per_token``: token-weighted; a gap ``g`` whose later chunk carried ``n`` tokens
    (``chunk_tokens[i]``) contributes ``n`` samples of ``g / n``. So chunks at 0, 10, 20 ms
    carrying [1, 1, 3] tokens give ``itl`` = [10, 10] and ``per_token`` = [10, 3.33, 3.33,
    3.33]. The first chunk's tokens have no gap (that is TTFT). A chunk counted as 0 tokens
    is treated as 1; a request whose ``chunk_tokens`` does not match its chunks counts one
    token per chunk. When every chunk carried one token, ``per_token`` is ``itl`` itself.
    """
    t = as_table(records)
    gaps = GapSamples(t, t.column("ok") & ~t.column("warmup"))
    itl = gaps.to_ms()
    if gaps.one_token_each:
        return itl, itl
    n = gaps.tokens()
    return itl, np.repeat(itl / n, n)


def distribution_samples(records: Records, frame: Any = None) -> dict[str, Any]:
    """{metric: the values its distribution summarizes (ms)} for every distribution of the
    registry, in its order, as its ``samples`` says: a ``request_frame`` column over ok or all
    measured requests (an array, may hold NaN), or the gaps of ``itl_values`` as
    ``gaps.GapSamples`` (``np.asarray`` materialises them; ``distribution`` does not). Warm-up
    excluded. ``frame``: ``request_frame(records)`` or ``derived_columns(records)`` when
    already built (only the derived columns are read; without either they are computed from
    the table, with no frame at all)."""
    t = as_table(records)
    cols = derived_columns(t) if frame is None else {k: np.asarray(frame[k]) for k in DERIVED_COLUMNS}
    return _samples(t, cols)


def _samples(t: RecordTable, cols: dict[str, np.ndarray]) -> dict[str, Any]:
    measured = ~t.column("warmup")
    eligible = t.column("ok") & measured
    rows = {"measured_requests": measured, "ok_requests": eligible}
    chunk = GapSamples(t, eligible)
    token = chunk if chunk.one_token_each else GapSamples(t, eligible, per_token=True)
    gaps = dict(zip(GAP_SAMPLES, (chunk, token)))
    out: dict[str, Any] = {}
    for d in metric_defs.DISTRIBUTIONS:
        kind = d.samples
        if kind in gaps:
            out[d.name] = gaps[kind]
        else:
            assert kind is not None, f"distribution {d.name} names no samples"  # metric_defs._dist sets it
            out[d.name] = cols[d.name][rows[kind]]
    return out


def summarize(
    records: Records,
    *,
    sla: sla_mod.Sla | None = None,
    incomplete: bool = False,
    seconds: float | None = None,
    streamed: bool = True,
) -> Measured:
    """The measured blocks of a run or of one stage: ``counts`` and ``window``
    (``analysis.counts``), ``metrics`` and ``sla`` (see docs/design.md, "Result files").
    ``streamed``: the run's protocol streams tokens (its backend's ``streamed``); False (a
    pooling protocol: embeddings, rerank) leaves out every metric that describes a token
    stream (``metric_defs.applicable``) and adds ``items_per_s``.
    ``incomplete``: the run or stage was stopped before its limits, so its verdict is
    ``incomplete``, never ``pass``. ``seconds``: the window's length when it is not the first
    measured send to the last end: a repeated run's repeats pooled, whose gaps (nothing in
    flight) are no part of its load; rates and the mean in flight are per second of it."""
    counts, window, metrics = measure(records, sla=sla, seconds=seconds, streamed=streamed)
    sla_block = sla_mod.evaluate(sla, {"counts": counts, "metrics": metrics}, incomplete=incomplete)
    return {"counts": counts, "window": window, "metrics": metrics, "sla": sla_block}


def measure(
    records: Records, *, sla: sla_mod.Sla | None = None, seconds: float | None = None, streamed: bool = True
) -> tuple[Counts, Window, Metrics]:
    """``summarize`` without the SLA verdict: the counts, window and metrics (``sla``'s SLOs
    still define goodput). A run's summary judges its SLA last, once every block it may bound
    (the GPUs' energy) exists (``runner/summarize.py``)."""
    table = as_table(records)
    keep = ~table.column("warmup")  # the measured requests: every count and statistic below
    counts = counts_block(table, keep)
    flight = spans(table, keep)
    window = window_block(flight[0], flight[1])
    if seconds is not None and window["start_ns"] is not None:
        window["seconds"] = seconds
    return counts, window, metrics_block(table, keep, counts, flight, window, sla, streamed)


def metrics_block(
    table: RecordTable,
    keep: np.ndarray,
    counts: Counts,
    flight: tuple[np.ndarray, np.ndarray, np.ndarray],
    window: Window,
    sla: sla_mod.Sla | None,
    streamed: bool = True,
) -> Metrics:
    """Every latency distribution of the registry that applies to the run (``streamed``: see
    ``summarize``), the throughputs per second of ``window``,
    the requests in flight over it (``flight``: ``counts.spans`` of the measured requests) and
    Little's law, goodput against ``sla``'s per-request SLOs (attained over ``counts``' ok +
    failed), and where the token counts came from."""
    seconds = window["seconds"]

    def rate(x: float) -> float | None:
        return float(x / seconds) if seconds > 0 else None

    ok = table.column("ok")[keep]
    derived = derived_columns(table)
    samples = _samples(table, derived)
    applies = {d.name for d in metric_defs.applicable(streamed)}
    out: dict[str, Any] = {
        d.name: distribution(samples[d.name])
        for d in metric_defs.DISTRIBUTIONS
        if d.name in applies and (not d.when_present or bool(np.isfinite(samples[d.name]).any()))
    }
    out_all = filled(table, "output_tokens")[keep]
    in_tokens = int(filled(table, "prompt_tokens")[keep][ok].sum())
    out_tokens = int(out_all[ok].sum())
    out["request_throughput_rps"] = rate(int(ok.sum()))
    out["input_tokens_per_s"] = rate(in_tokens)
    if streamed:
        out["output_tokens_per_s"] = rate(out_tokens)
        out["total_tokens_per_s"] = rate(in_tokens + out_tokens)
    else:  # embedded inputs or reranked documents of the ok requests
        out["items_per_s"] = rate(int(filled(table, "items")[keep][ok].sum()))
    start, end = window["start_ns"], window["end_ns"]
    send, ends, has_end = flight
    in_flight = None if start is None or end is None else mean_concurrency(send, ends, start, end)
    # Over first send to last end; a window of fewer seconds (repeats' gaps left out) holds the
    # same requests in flight for less time.
    span_s = 0.0 if start is None or end is None else (end - start) / 1e9
    if in_flight is not None and seconds != span_s:
        in_flight = in_flight * span_s / seconds if seconds > 0 else None
    out["mean_concurrency"] = in_flight
    out["littles_law"] = littles_law(send, ends, has_end)
    slos = sla_mod.set_slos(sla)
    good = sla_mod.good_mask(ok, {k: derived[k][keep] for k in slos}, slos)
    goodput: dict[str, Any] = {"requests_per_s": rate(int(good.sum()))}
    if streamed:
        goodput["output_tokens_per_s"] = rate(int(out_all[good].sum()))
    goodput["attained_fraction"] = ratio(int(good.sum()), counts["ok"] + counts["failed"])
    out["goodput"] = goodput
    reasoning = _reasoning(table)
    if reasoning is not None:
        out["reasoning"] = reasoning
    measured_ok = keep.copy()
    measured_ok[keep] = ok
    out["token_count_source"] = value_counts(table.column("token_source")[measured_ok])
    out["prompt_tokens_source"] = value_counts(table.column("prompt_tokens_source")[measured_ok])
    timings = server_timings(table, derived, measured_ok)
    if timings is not None:
        out["server_timings"] = timings
    return cast(Metrics, out)


def client_limits(records: Records, *, lag_threshold_ms: float = 10.0) -> dict | None:
    """A "client_limited" warning when p99 send lag (``t_send - t_sched``) of measured
    requests exceeds ``lag_threshold_ms``: then the client, not the server, set the pace."""
    t = as_table(records)
    measured = ~t.column("warmup")
    lag = (t.column("t_send_ns")[measured] - t.column("t_sched_ns")[measured]) / 1e6
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


def _reasoning(records: Records) -> dict | None:
    """Time to first reasoning token (ms) over ok measured requests that streamed reasoning."""
    t = as_table(records)
    with_reasoning = ~t.column("warmup") & (t.column("n_reasoning") > 0)
    if not with_reasoning.any():
        return None
    first, _ = t.ints("t_first_reasoning_ns")
    ttfr = (first - t.column("t_send_ns"))[with_reasoning & t.column("ok")] / 1e6
    return {"requests": int(with_reasoning.sum()), "ttfr_ms": distribution(ttfr)}
