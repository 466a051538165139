"""The report's plots as PNG bytes: latency CDFs with the SLA drawn in, latencies over time,
and per-second throughput, in-flight requests and errors.

Headless and stateless: every figure is a ``matplotlib.figure.Figure`` with its own Agg canvas,
never pyplot, so nothing leaks between figures and a notebook's backend is left alone.
Warm-up requests are excluded except in the over-time scatters, where they are drawn in grey
and labelled as such.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from loadgen import metric_defs
from loadgen.analysis.gaps import GapSamples, cdf_points
from loadgen.analysis.metrics import Records, as_table, derived_columns, distribution_samples
from loadgen.analysis.table import RecordTable
from loadgen.report import timeseries
from loadgen.summary import Summary

DPI = 110
_OK, _WARM, _FAIL, _LINE = "#1f77b4", "#b0b0b0", "#d62728", "#444444"
_THRESHOLD_STYLES = ("--", ":", "-.")


@dataclass(frozen=True, slots=True)
class Plot:
    name: str  # file stem under plots/
    title: str
    caption: str
    png: bytes


def chunk_plots(summary: Summary, records: Records) -> dict[str, Plot]:
    """The plots drawn from the chunk lists, by name: the ITL CDF and the per-second bins.
    ``loadgen.report`` draws them first, so that it can free the lists (most of a long run's
    table: ``RecordTable.without_chunks``) before the other plots, the frame and the files."""
    table = as_table(records)
    eligible = table.column("ok") & ~table.column("warmup")  # as metrics.distribution_samples
    itl = GapSamples(table, eligible)
    itl_tok = itl if itl.one_token_each else GapSamples(table, eligible, per_token=True)
    per_second = {"per_second": _per_second(table)}
    if not metric_defs.present(summary, "itl_ms"):  # no token stream: no ITL to draw
        return per_second
    return {
        "cdf_itl": _cdf(
            "cdf_itl",
            "Inter-token latency",
            {"per chunk": itl, "per token": itl_tok} if itl is not itl_tok else {"ITL": itl},
            summary,
            ("itl_ms", "itl_per_token_ms"),
        ),
        **per_second,
    }


def render_plots(summary: Summary, records: Records, drawn: Mapping[str, Plot] | None = None) -> list[Plot]:
    """The report's plots of a run (a ``RecordTable`` or its records); ``drawn``: what
    ``chunk_plots`` gave for it, when the caller has drawn those already."""
    table = as_table(records)
    early = dict(drawn) if drawn is not None else chunk_plots(summary, table)
    derived = derived_columns(table)
    samples = distribution_samples(table, derived)

    def cdf(name: str, metric: str) -> Plot:
        d = metric_defs.get(metric)
        return _cdf(name, d.plot_title, {d.label: samples[metric]}, summary, (metric,))

    # Each plot and the metric it draws: a run whose summary lacks the metric (embeddings,
    # rerank: no token stream) gets no empty plot of it.
    plots: list[tuple[str, Callable[[], Plot]]] = [
        ("ttft_ms", lambda: cdf("cdf_ttft", "ttft_ms")),
        ("itl_ms", lambda: early["cdf_itl"]),
        ("tpot_ms", lambda: cdf("cdf_tpot", "tpot_ms")),
        ("e2e_ms", lambda: cdf("cdf_e2e", "e2e_ms")),
        ("ttft_ms", lambda: _over_time("ttft_over_time", "ttft_ms", derived, summary, table)),
        ("e2e_ms", lambda: _over_time("e2e_over_time", "e2e_ms", derived, summary, table)),
        ("request_throughput_rps", lambda: early["per_second"]),
    ]
    return [draw() for metric, draw in plots if metric_defs.present(summary, metric)]


def thresholds(summary: Summary, metrics: Sequence[str]) -> list[tuple[str, float]]:
    """(label, value in ms) of every SLA line for these metrics: per-request SLOs, then rules."""
    sla = summary.get("sla") or {}
    out = [(f"SLO {k} <= {v:g}", float(v)) for k, v in (sla.get("slos") or {}).items() if k in metrics]
    out += [
        (d["rule"], float(d["threshold"]))
        for d in sla.get("details") or []
        if d.get("metric") in metrics and d.get("threshold") is not None
    ]
    return out


def _cdf(
    name: str,
    title: str,
    series: Mapping[str, Any],
    summary: Summary,
    metrics: Sequence[str],
) -> Plot:
    fig, ax = _figure()
    drawn = False
    for label, values in series.items():  # arrays, or gaps.GapSamples (a long run's ITL)
        x, y, n = cdf_points(values)
        if n:
            ax.step(x, y, where="post", label=f"{label} (n={n})")
            drawn = True
    _draw_thresholds(ax, thresholds(summary, metrics), vertical=True)
    if not drawn:
        _no_data(ax)
    ax.set_xlabel(f"{title} (ms)")
    ax.set_ylabel("fraction of requests <= x")
    ax.set_ylim(0, 1.02)
    for q in (0.5, 0.99):
        ax.axhline(q, color="#dddddd", lw=0.8, zorder=0)
    ax.set_title(f"{title}: cumulative distribution")
    legend(ax, loc="lower right", fontsize=8)
    caption = (
        f"CDF of {title} over measured ok requests; dashed and dotted lines are the SLA "
        "thresholds for this metric."
        if thresholds(summary, metrics)
        else f"CDF of {title} over measured ok requests (no SLA threshold set for it)."
    )
    return Plot(name, f"{title} CDF", caption, _png(fig))


def _over_time(
    name: str, column: str, derived: Mapping[str, np.ndarray], summary: Summary, table: RecordTable
) -> Plot:
    title = metric_defs.get(column).plot_title
    fig, ax = _figure()
    win = timeseries.window_ns(table)
    t0 = win[0] if win else 0
    send = table.column("t_send_ns")
    t = (send - t0) / 1e9
    y = np.asarray(derived[column], dtype=np.float64)
    ok, warm = table.column("ok"), table.column("warmup")
    groups = [(ok & ~warm, _OK, "o", "measured"), (warm, _WARM, "o", "warm-up (not in statistics)")]
    failed = ~ok & ~warm
    if column == "e2e_ms":  # a failure has no E2E latency; show how long it took to fail
        end, has_end = table.ints("t_end_ns")
        y = np.where(failed & has_end, (end - send) / 1e6, y)
    groups.append((failed, _FAIL, "x", "failed" + (" (time to failure)" if column == "e2e_ms" else "")))
    for mask, colour, marker, label in groups:
        keep = mask & ~np.isnan(y)
        if keep.any():
            ax.scatter(t[keep], y[keep], s=10, c=colour, marker=marker, label=label, linewidths=0.8)
    _draw_thresholds(ax, thresholds(summary, (column,)), vertical=False)
    if not (~np.isnan(y)).any():
        _no_data(ax)
    if (~np.isnan(y)).any():  # headroom above the points for the legend
        ax.set_ylim(0, max(np.nanmax(y), *(v for _, v in thresholds(summary, (column,))), 0) * 1.35 or 1)
    ax.set_xlabel("send time (s since first measured send)")
    ax.set_ylabel(f"{title} (ms)")
    ax.set_title(f"{title} over time")
    legend(ax, loc="upper right", fontsize=8)
    return Plot(
        name,
        f"{title} over time",
        f"{title} of each request against its send time; "
        "warm-up requests are drawn in grey (marked) and are not in any statistic.",
        _png(fig),
    )


def _per_second(records: RecordTable) -> Plot:
    bins = timeseries.per_second_bins(records)
    n = len(bins["t_s"])
    fig = Figure(figsize=(9.0, 6.4), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(3, 1, sharex=True)
    if n:
        x = np.append(bins["t_s"], bins["t_s"][-1] + bins["width_s"][-1])
        for ax, col, colour in ((axes[0], "output_tokens_per_s", _OK), (axes[1], "in_flight", "#2ca02c")):
            ax.stairs(bins[col], x, color=colour, lw=1.5)
        # one filled outline, not a bar per second: a long run has thousands of seconds
        axes[2].stairs(bins["errors"], x, fill=True, color=_FAIL)
    else:
        for ax in axes:
            _no_data(ax)
    axes[0].set_ylabel("output tokens/s")
    axes[1].set_ylabel("in flight")
    axes[2].set_ylabel("errors")
    axes[2].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].set_ylim(0, max(1, float(bins["errors"].max()) if n else 1) * 1.1)
    axes[2].set_xlabel("time (s since first measured send), one-second bins")
    axes[0].set_title("Output tokens/s, requests in flight and errors per second")
    for ax in axes:
        ax.grid(True, color="#eeeeee")
        if ax is not axes[2]:
            ax.set_ylim(bottom=0)
    return Plot(
        "per_second",
        "Throughput, in-flight requests and errors over time",
        "One-second bins over the measured window: output tokens streamed per second, "
        "time-averaged requests in flight, and failed requests by the second they ended.",
        _png(fig),
    )


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=(6.4, 3.8), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, color="#eeeeee")
    return fig, ax


def _draw_thresholds(ax: Axes, lines: list[tuple[str, float]], *, vertical: bool) -> None:
    for i, (label, value) in enumerate(lines):
        style = _THRESHOLD_STYLES[i % len(_THRESHOLD_STYLES)]
        draw = ax.axvline if vertical else ax.axhline
        draw(value, color=_FAIL if "SLO" not in label else "#ff7f0e", ls=style, lw=1.2, label=label)


def _no_data(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color=_LINE)


def legend(ax: Axes, **kw: Any) -> None:
    """The axes' legend, when anything on them carries a label: a plot with nothing to label (a
    run whose every request failed has no CDF step and no measured point) gets none, rather than
    matplotlib's "No artists with labels found" warning on the console."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def new_figure(figsize: tuple[float, float] = (6.4, 3.8)) -> Figure:
    """An empty figure in the report's style, on its own Agg canvas (for the other plot modules)."""
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_png(fig: Figure) -> bytes:
    """A figure as PNG bytes, as every report plot is saved (no Software stamp)."""
    return _png(fig)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()
