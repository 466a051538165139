"""Render a CurveComparison: overlaid load curves (one PNG per metric, one curve per run, the
SLA thresholds as lines, each run's knee starred) and the capacity-at-SLA table of compare.md.

Figures are ``matplotlib.figure.Figure`` objects (no pyplot state), as in ``report.compare``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadgen import metric_defs
from loadgen.analysis.compare_curves import (
    CAPACITY_SEARCHED,
    HIGHEST_PASSING_STAGE,
    PLOTS,
    CurveComparison,
    RunCurve,
)

LOG_RATIO = 30.0  # a latency axis spanning more than this factor (thresholds included) is logarithmic
GEOMETRIC_RATIO = 8.0  # an offered-load axis spanning more than this factor is logarithmic (base 2)
_SLA_COLOR = "#d62728"


def plot_file(key: str) -> str:
    return f"curve_{key}.png"


def num(v: float | None) -> str:
    """4 significant digits, integers as integers, missing as an em dash (as compare.md)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    v = float(v)
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"


def _offered(value: Any, kind: str | None) -> str:
    if value is None:
        return "—"
    return f"c={num(value)}" if kind == "concurrency" else f"{num(value)} req/s"


def _title(metric: str, stat: str | None) -> str:
    title = metric_defs.get(metric).plot_title
    return f"{stat} {title}" if stat else title


def _y(point: dict[str, Any], metric: str, stat: str | None) -> float | None:
    v = point.get(metric)
    if stat is not None:
        v = (v or {}).get(stat)
    return None if v is None else float(v)


def _x_label(cc: CurveComparison, x: str) -> str:
    if x == "throughput_rps":
        return "throughput (req/s)"
    kinds = sorted({r.x for r in cc.runs})
    unit = " or ".join("concurrency" if k == "concurrency" else "req/s" for k in kinds)
    return f"offered load ({unit})"


def curve_figures(cc: CurveComparison) -> dict[str, Any]:
    """{plot key: Figure}: each of ``PLOTS`` with one curve per run."""
    return {key: _curve_figure(cc, x, metric, stat) for key, x, metric, stat in PLOTS}


def _curve_figure(cc: CurveComparison, x: str, metric: str, stat: str | None) -> Figure:
    """One plot: ``stat`` of ``metric`` against ``x``, a curve per run, the SLA's thresholds."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(7.5, 4.6), dpi=100)
    ax = fig.add_subplot()
    ys: list[float] = []
    unsteady = False
    for i, run in enumerate(cc.runs):
        run_ys, run_unsteady = _plot_run(ax, run, f"C{i % 10}", x, metric, stat)
        ys += run_ys
        unsteady = unsteady or run_unsteady
    for op, threshold, labels in cc.thresholds(metric, stat):
        whose = "" if len(labels) == len(cc.runs) else f" ({', '.join(labels)})"
        ax.axhline(
            threshold,
            ls="--",
            lw=1,
            color=_SLA_COLOR,
            label=f"SLA {stat + ' ' if stat else ''}{metric} {op} {num(threshold)}{whose}",
        )
        ys.append(threshold)
    _scale_axes(ax, cc, x, stat, ys)
    handles, _ = ax.get_legend_handles_labels()
    if unsteady:
        handles.append(
            Line2D([], [], marker="o", ls="", mfc="white", mec="grey", label="hollow: stage not steady")
        )
    unit = metric_defs.get(metric).unit
    ax.set_xlabel(_x_label(cc, x))
    ax.set_ylabel(f"{_title(metric, stat)} ({unit})")
    against = "throughput" if x == "throughput_rps" else "offered load"
    ax.set_title(f"{_title(metric, stat)} vs {against}")
    ax.grid(alpha=0.3)
    if handles:  # nothing labelled (no run had a point): no legend, and no matplotlib warning
        ax.legend(handles=handles, loc="best", fontsize="small")
    fig.tight_layout()
    return fig


def _plot_run(
    ax: Axes, run: RunCurve, color: str, x: str, metric: str, stat: str | None
) -> tuple[list[float], bool]:
    """One run's curve (its unsteady stages hollow, a multi-stage run's points labelled with their
    offered load) and its knee; its y values, and whether any stage was unsteady."""
    pts: list[tuple[dict[str, Any], float, float]] = []
    for p in run.points:
        a, b = p.get(x), _y(p, metric, stat)
        if a is not None and b is not None:
            pts.append((p, float(a), b))
    label = run.label if pts else f"{run.label} (no data)"
    ax.plot([a for _, a, _ in pts], [b for _, _, b in pts], "-o", color=color, label=label, ms=5)
    unsteady = False
    for p, a, b in pts:
        if p.get("steady") is False:  # hollow: the stage is too short or unstable to trust
            unsteady = True
            ax.plot([a], [b], "o", ms=5, mfc="white", mec=color, zorder=3)
        if run.multi_stage and x != "offered":
            ax.annotate(
                _offered(p.get("offered"), p.get("offered_kind")),
                (a, b),
                xytext=(4, 4),
                textcoords="offset points",
                fontsize=7,
                color=color,
            )
    _mark_knee(ax, run, x, metric, stat, color)
    return [b for _, _, b in pts], unsteady


def _scale_axes(ax: Axes, cc: CurveComparison, x: str, stat: str | None, ys: list[float]) -> None:
    """Log scales where the values span too much for a linear one to show the small ones."""
    from matplotlib.ticker import ScalarFormatter

    positive = [y for y in ys if y > 0]
    if stat is not None and positive and max(positive) / min(positive) > LOG_RATIO:
        ax.set_yscale("log")
    xs = [float(p[x]) for r in cc.runs for p in r.points if p.get(x) is not None and p[x] > 0]
    if x == "offered" and xs and max(xs) / min(xs) > GEOMETRIC_RATIO:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.margins(x=0.08)


def _mark_knee(ax: Axes, run: RunCurve, x: str, metric: str, stat: str | None, color: str) -> None:
    p = run.knee_point()
    y = None if p is None else _y(p, metric, stat)
    if p is None or p.get(x) is None or y is None:
        return
    ax.plot(
        [float(p[x])],
        [y],
        marker="*",
        ms=15,
        ls="",
        color=color,
        mec="black",
        zorder=4,
        label=f"knee {run.label}: {p['name']}",
    )


def capacity_lines(cc: CurveComparison) -> list[str]:
    """The "Capacity at the SLA" section of compare.md."""
    lines = [
        "## Capacity at the SLA",
        "",
        "| run | label | capacity at the SLA | 95% CI | throughput there (req/s) | knee |",
        "|---|---|---|---|---|---|",
    ]
    for r in cc.runs:
        c = r.capacity
        if c.basis == CAPACITY_SEARCHED:
            value = f"{num(c.value)} req/s (capacity search)"
        elif c.basis == HIGHEST_PASSING_STAGE:
            kind = "concurrency" if c.unit == "concurrency" else "rate"
            top = "; the sweep's highest, capacity may be higher" if c.at_top else ""
            at_least = "≥ " if c.at_top else ""
            value = f"{at_least}{_offered(c.value, kind)} offered (highest stage passing the SLA{top})"
        else:
            value = f"none ({c.detail})"
        ci = f"[{num(c.ci95[0])}, {num(c.ci95[1])}] req/s" if c.ci95 else "—"
        k = r.knee
        knee = f"{k['name']} at {num(k.get('throughput_rps'))} req/s" if k else "—"
        lines.append(
            f"| {_cell(r.name)} | {_cell(r.label)} | {value} | {ci} | {num(c.throughput_rps)} | {knee} |"
        )
    lines += [
        "",
        f"Runs are labelled by `{cc.label_source}`. Capacity is `summary.capacity.capacity_rps` "
        "with its 95% CI where the run has one (`loadgen capacity`); otherwise the offered load "
        "of the highest stage whose SLA verdict is pass: a lower bound on the sweep's grid, not "
        "a search. The metrics table above pools every stage of a multi-stage run; the load "
        "curves below compare them stage by stage.",
        "",
    ]
    return lines


def curve_image_lines(cc: CurveComparison) -> list[str]:
    """The "Load curves" section of compare.md: the overlay images."""
    lines = ["", "## Load curves", ""]
    for key, x, metric, stat in PLOTS:
        against = "throughput" if x == "throughput_rps" else "offered load"
        lines.append(f"![{_title(metric, stat)} vs {against}]({plot_file(key)})")
    lines += [
        "",
        "One curve per run, one point per stage (hollow: not in a steady state); the star is "
        "each run's knee, dashed lines the SLA thresholds.",
    ]
    return lines


def write_curves(cc: CurveComparison, out_dir: Path) -> list[Path]:
    written = []
    for key, fig in curve_figures(cc).items():
        path = out_dir / plot_file(key)
        fig.savefig(path)
        written.append(path)
    return written


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
