"""The report's plots as PNG bytes: latency CDFs with the SLA drawn in, latencies over time,
and per-second throughput, in-flight requests and errors.

Headless and stateless: every figure is a ``matplotlib.figure.Figure`` with its own Agg canvas,
never pyplot, so nothing leaks between figures and a notebook's backend is left alone.
Warm-up requests are excluded except in the over-time scatters, where they are drawn in grey
and labelled as such.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from loadgen import metric_defs
from loadgen.analysis.metrics import distribution_samples, request_frame
from loadgen.records import RequestRecord
from loadgen.report import timeseries

DPI = 110
_OK, _WARM, _FAIL, _LINE = "#1f77b4", "#b0b0b0", "#d62728", "#444444"
_THRESHOLD_STYLES = ("--", ":", "-.")


@dataclass(frozen=True, slots=True)
class Plot:
    name: str  # file stem under plots/
    title: str
    caption: str
    png: bytes


def render_plots(summary: Mapping[str, Any], records: Sequence[RequestRecord]) -> list[Plot]:
    frame = request_frame(records)
    samples = distribution_samples(records, frame)
    itl, itl_tok = samples["itl_ms"], samples["itl_per_token_ms"]

    def cdf(name: str, metric: str) -> Plot:
        d = metric_defs.get(metric)
        return _cdf(name, d.plot_title, {d.label: samples[metric]}, summary, (metric,))

    out = [
        cdf("cdf_ttft", "ttft_ms"),
        _cdf(
            "cdf_itl",
            "Inter-token latency",
            {"per chunk": itl, "per token": itl_tok} if not np.array_equal(itl, itl_tok) else {"ITL": itl},
            summary,
            ("itl_ms", "itl_per_token_ms"),
        ),
        cdf("cdf_tpot", "tpot_ms"),
        cdf("cdf_e2e", "e2e_ms"),
        _over_time("ttft_over_time", "ttft_ms", frame, summary, records),
        _over_time("e2e_over_time", "e2e_ms", frame, summary, records),
        _per_second(records),
    ]
    return out


def thresholds(summary: Mapping[str, Any], metrics: Sequence[str]) -> list[tuple[str, float]]:
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
    series: Mapping[str, npt.NDArray[Any]],
    summary: Mapping[str, Any],
    metrics: Sequence[str],
) -> Plot:
    fig, ax = _figure()
    drawn = False
    for label, values in series.items():
        v = np.sort(np.asarray(values, np.float64)[~np.isnan(np.asarray(values, np.float64))])
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=f"{label} (n={v.size})")
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
    ax.legend(loc="lower right", fontsize=8)
    caption = (
        f"CDF of {title} over measured ok requests; dashed and dotted lines are the SLA "
        "thresholds for this metric."
        if thresholds(summary, metrics)
        else f"CDF of {title} over measured ok requests (no SLA threshold set for it)."
    )
    return Plot(name, f"{title} CDF", caption, _png(fig))


def _over_time(
    name: str, column: str, frame: pd.DataFrame, summary: Mapping[str, Any], records: Sequence[RequestRecord]
) -> Plot:
    title = metric_defs.get(column).plot_title
    fig, ax = _figure()
    win = timeseries.window_ns(records)
    t0 = win[0] if win else 0
    t = (frame["t_send_ns"].to_numpy() - t0) / 1e9
    y = frame[column].to_numpy(dtype=np.float64)
    ok, warm = frame["ok"].to_numpy(), frame["warmup"].to_numpy()
    groups = [(ok & ~warm, _OK, "o", "measured"), (warm, _WARM, "o", "warm-up (not in statistics)")]
    failed = ~ok & ~warm
    if column == "e2e_ms":  # a failure has no E2E latency; show how long it took to fail
        end = frame["t_end_ns"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
        y = np.where(failed, (end - frame["t_send_ns"].to_numpy()) / 1e6, y)
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
    ax.legend(loc="upper right", fontsize=8)
    return Plot(
        name,
        f"{title} over time",
        f"{title} of each request against its send time; "
        "warm-up requests are drawn in grey (marked) and are not in any statistic.",
        _png(fig),
    )


def _per_second(records: Sequence[RequestRecord]) -> Plot:
    bins = timeseries.per_second(records)
    fig = Figure(figsize=(9.0, 6.4), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(3, 1, sharex=True)
    if len(bins):
        x = np.append(bins["t_s"].to_numpy(), bins["t_s"].iloc[-1] + bins["width_s"].iloc[-1])
        for ax, col, colour in ((axes[0], "output_tokens_per_s", _OK), (axes[1], "in_flight", "#2ca02c")):
            v = bins[col].to_numpy()
            ax.stairs(v, x, color=colour, lw=1.5)
        axes[2].bar(bins["t_s"], bins["errors"], width=bins["width_s"], align="edge", color=_FAIL)
    else:
        for ax in axes:
            _no_data(ax)
    axes[0].set_ylabel("output tokens/s")
    axes[1].set_ylabel("in flight")
    axes[2].set_ylabel("errors")
    axes[2].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].set_ylim(0, max(1, float(bins["errors"].max()) if len(bins) else 1) * 1.1)
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
