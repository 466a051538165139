"""The per-request data report.html's interactive section embeds, and what it says about them.

The page recomputes the SLO verdict and goodput from these columns, so they hold exactly what
``analysis.metrics`` reads for that (TTFT, TPOT, E2E per measured request, its status, its
output tokens) and the run-level figures it cannot recompute (the window's seconds, the error
rate, ``sla.max_error_rate``). Numbers and error class names only: no prompt, answer, header,
message or URL ever reaches the page.

A run of more than ``MAX_REQUESTS`` measured requests embeds a down-sample (``sample_rows``):
the ``KEEP_SLOWEST`` slowest, always, plus a uniform sample of the rest drawn with the fixed
``SEED``; each sampled row then stands for ``weight`` requests, so the page's figures are
estimates and it says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from loadgen import metric_defs
from loadgen.analysis.table import RecordTable
from loadgen.config.sla import MAX_ERROR_RATE
from loadgen.metric_defs.model import ALWAYS_PRESENT
from loadgen.records import CANCELLED
from loadgen.report.curve import is_multi_stage
from loadgen.summary import Summary

__all__ = [
    "KEEP_SLOWEST",
    "MAX_REQUESTS",
    "SEED",
    "SLOWEST_ROWS",
    "STATUS",
    "Ranked",
    "embedded_data",
    "ranked",
    "run_slos",
    "sample_rows",
    "slowest_order",
]

MAX_REQUESTS = 20_000  # past this many measured requests the page embeds a sample
KEEP_SLOWEST = 200  # always embedded: the requests the timeline and the table are about
SEED = 0  # the sample is the same every time the report is written
SLOWEST_ROWS = 20  # rows of the slowest-requests table
STATUS = {"ok": 0, "failed": 1, "cancelled": 2}  # the ``status`` column's codes
_MS = 1e6


@dataclass(frozen=True, slots=True)
class Ranked:
    """A run's records with what the section reads of every one: the measured requests slowest
    first (``slowest_order``) and each SLO's per-request latency in ms (``metric_defs.SLOS``:
    their registry formulas, the columns the summary's goodput reads; NaN where undefined)."""

    table: RecordTable
    order: np.ndarray
    latency: dict[str, np.ndarray]


def ranked(table: RecordTable, slos: Sequence[str] = metric_defs.SLOS) -> Ranked:
    """Only the SLOs' columns (``slos``: the run's, ``run_slos``), not every derived one: a long
    run's report holds enough already."""
    latency = {}
    for name in slos:
        formula = metric_defs.get(name).formula
        assert formula is not None, f"SLO {name} has no formula"  # every SLO is a per-request latency
        latency[name] = formula(table)
    return Ranked(table, slowest_order(table), latency)


def run_slos(summary: Summary) -> tuple[str, ...]:
    """The registry's SLOs the run has (an embeddings or rerank run: E2E alone, no TTFT or TPOT
    to set a bound on)."""
    return tuple(name for name in metric_defs.SLOS if metric_defs.present(summary, name))


def slowest_order(table: RecordTable) -> np.ndarray:
    """Row indices of the measured requests, slowest first: send to the end of the stream or
    of the failure (a request with no end, never answered, counts as slowest of all)."""
    measured = np.flatnonzero(~table.column("warmup"))
    send = table.column("t_send_ns")
    end, has_end = table.ints("t_end_ns")
    duration = np.where(has_end, end - send, np.iinfo(np.int64).max)[measured]
    return measured[np.argsort(-duration, kind="stable")]


def sample_rows(order: np.ndarray) -> tuple[np.ndarray, float]:
    """(rows to embed, in record order; the weight of each uniformly sampled row) from
    ``order`` (``slowest_order``): every row when there are at most ``MAX_REQUESTS``, else the
    ``KEEP_SLOWEST`` first (of weight 1) plus ``MAX_REQUESTS - KEEP_SLOWEST`` of the others
    drawn uniformly with ``SEED``, each standing for ``len(others) / drawn`` requests."""
    if len(order) <= MAX_REQUESTS:
        return np.sort(order), 1.0
    rest = order[KEEP_SLOWEST:]
    drawn = np.random.default_rng(SEED).choice(rest, size=MAX_REQUESTS - KEEP_SLOWEST, replace=False)
    return np.sort(np.concatenate([order[:KEEP_SLOWEST], drawn])), len(rest) / len(drawn)


def embedded_data(summary: Summary, runs: Ranked) -> dict[str, Any]:
    """The JSON the page reads: ``run`` (its fixed figures), ``slos`` (the registry's, each with
    the run's value), ``sample`` (how many were embedded, and how), ``cols`` (a list per column,
    a row per embedded request, sorted by send time), ``stages`` and, for a multi-stage run,
    ``curve``."""
    table, order = runs.table, runs.order
    rows, weight = sample_rows(order)
    send = table.column("t_send_ns")
    rows = rows[np.argsort(send[rows], kind="stable")]
    latency = {k: v[rows] for k, v in runs.latency.items()}
    counts = summary.get("counts") or {}
    window = summary.get("window") or {}
    t0 = window.get("start_ns") or (int(send[rows].min()) if len(rows) else 0)
    sampled = len(rows) < len(order)
    slos = [_slo(summary, name) for name in runs.latency]
    in_rows = {int(r): i for i, r in enumerate(rows)}
    return {
        "run": {
            "seconds": window.get("seconds") or 0.0,
            "ok": counts.get("ok", 0),
            "failed": counts.get("failed", 0),
            "cancelled": counts.get("cancelled", 0),
            "error_rate": counts.get("error_rate"),
            "max_error_rate": _max_error_rate(summary),
            "incomplete": not summary.get("complete", not summary.get("interrupted")),
            "all_warmup": not counts.get("sent") and bool(counts.get("warmup")),
        },
        "percentiles": dict(metric_defs.PERCENTILES),
        "slos": slos,
        # the SLO the timeline colours each request's decode by: the per-token one (TPOT; none
        # for a run without a token stream)
        "itl_slo": next((s["name"] for s in slos if s["nan_passes"]), None),
        "sample": {
            "measured": len(order),
            "embedded": len(rows),
            "sampled": sampled,
            "weight": weight,
            "seed": SEED,
            "slowest_kept": KEEP_SLOWEST if sampled else 0,
            # embedded rows of the slowest requests, slowest first (every one is embedded)
            "slowest_rows": [in_rows[int(r)] for r in order[:KEEP_SLOWEST]],
        },
        "cols": _columns(table, rows, latency, t0),
        "stages": {str(s.get("index")): str(s.get("name")) for s in summary.get("stages") or []},
        "curve": _curve(summary) if is_multi_stage(summary) else None,
    }


def _max_error_rate(summary: Summary) -> float:
    sla = ((summary.get("conditions") or {}).get("profile") or {}).get("sla") or {}
    return float(sla.get("max_error_rate", MAX_ERROR_RATE))


def _slo(summary: Summary, name: str) -> dict[str, Any]:
    d = metric_defs.get(name)
    assert d.formula is not None, f"SLO {name} has no formula"  # every SLO is a per-request latency
    value = ((summary.get("sla") or {}).get("slos") or {}).get(name)
    return {
        "name": name,
        "label": d.label,
        "value": value,
        "nan_passes": d.formula.per_token,  # analysis.sla.good_mask: no TPOT is no slow token
        "rows": d.samples,  # "ok_requests": the percentile is over ok requests only
    }


def _columns(table: RecordTable, rows: np.ndarray, latency: Mapping[str, np.ndarray], t0: int) -> dict:
    """The embedded columns: times in ms from the window's start (to the microsecond), the
    SLO latencies exactly as the summary computed them (so the page's verdict is the summary's)."""
    ok = table.column("ok")[rows]
    errors = table.column("error_class")[rows]
    status = np.where(ok, STATUS["ok"], np.where(errors == CANCELLED, STATUS["cancelled"], STATUS["failed"]))

    def times(name: str) -> list[float | None]:
        values = table.column(name)
        present = np.ones(len(values), bool) if name in ALWAYS_PRESENT else table.present(name)
        return [round((int(v) - t0) / _MS, 3) if p else None for v, p in zip(values[rows], present[rows])]

    def counts(name: str) -> list[int | None]:
        values, present = table.ints(name)
        return [int(v) if p else None for v, p in zip(values[rows], present[rows])]

    return {
        "id": [int(v) for v in table.column("id")[rows]],
        "stage": [int(v) for v in table.column("stage")[rows]],
        "status": [int(v) for v in status],
        "error": [None if o or not e else str(e) for o, e in zip(ok, errors)],
        "prompt": counts("prompt_tokens"),
        "output": counts("output_tokens"),
        "send": times("t_send_ns"),
        "first": times("t_first_token_ns"),
        "last": times("t_last_chunk_ns"),
        "end": times("t_end_ns"),
        **{name: [None if math.isnan(v) else float(v) for v in values] for name, values in latency.items()},
    }


_STATS = ("p50", "p99")  # the percentiles of each latency the curves show


def _stat(points: list[dict[str, Any]], name: str, stat: str) -> list[float | None]:
    return [(p.get(name) or {}).get(stat) for p in points]


def _curve(summary: Summary) -> dict[str, Any]:
    """The curve points the load slider reads: x (the offered load, or the stage index when a
    stage offered none), and a group per plot: each plotted latency's p50 and p99 (one plot
    each), the output tokens/s, the requests/s and goodput."""
    points = cast(list[dict[str, Any]], (summary.get("curve") or {}).get("points") or [])
    by_offered = all(p.get("offered") is not None for p in points)
    kind = points[0].get("offered_kind") if by_offered and points else None
    pts = sorted(points, key=lambda p: p["offered"] if by_offered else p["stage"])

    def series(keys: dict[str, str]) -> dict[str, list[float | None]]:
        return {label: [p.get(key) for p in pts] for label, key in keys.items()}

    return {
        "x_label": {"concurrency": "concurrency", "rate": "offered rate (req/s)"}.get(str(kind), "stage"),
        "x": [p["offered"] if by_offered else p["stage"] for p in pts],
        "names": [f"stage {p.get('stage')} ({p.get('name')})" for p in pts],
        "groups": [
            *(
                {
                    "title": f"{d.label} (ms)",
                    "series": {f"{d.label} {stat}": _stat(pts, d.name, stat) for stat in _STATS},
                }
                for d in metric_defs.CURVE_PLOTS
            ),
            {"title": "output tokens/s", "series": series({"output tokens/s": "output_tokens_per_s"})},
            {
                "title": "requests/s",
                "series": series({"requests/s": "throughput_rps", "goodput req/s": "goodput_rps"}),
            },
        ],
    }
