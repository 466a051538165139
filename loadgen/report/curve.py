"""The report of a run with several load stages: its latency-throughput curves and the
"Load stages" section (a row per stage, the knee, the last stage that met the SLA, and a
warning for every stage too short or too unstable to mean anything).

Everything is read from ``summary["stages"]`` and ``summary["curve"]`` (the threshold lines
from ``summary["sla"]``); nothing is recomputed, so the plots, the table and summary.json
cannot disagree. A single-stage run has neither, and gets no plot and no section from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

from matplotlib.axes import Axes

from loadgen import metric_defs
from loadgen.report.blocks import Image, num
from loadgen.report.plots import Plot, legend, new_figure, thresholds, to_png
from loadgen.summary import Summary

PLOT_PREFIX = "curve_"
MAIN_PLOT = "curve_ttft"  # throughput against TTFT: the headline's plot of a multi-stage run
# The plotted latencies (the registry's ``curve_plot`` distributions): (metric, label).
LATENCIES: tuple[tuple[str, str], ...] = tuple((d.name, d.label) for d in metric_defs.CURVE_PLOTS)
HEADLINE = LATENCIES[0][0]  # the latency whose p50 the stage table shows too, and the knee follows
_STATS = (("p50", "#1f77b4", "o"), ("p99", "#9467bd", "s"))
_KNEE, _MET, _SLO, _RULE = "#444444", "#2e7d32", "#ff7f0e", "#d62728"
_LOG_RATIO = 30.0  # a latency axis spanning more than this factor (thresholds included) is logarithmic


def is_multi_stage(summary: Summary) -> bool:
    return len(summary.get("stages") or []) > 1 and bool((summary.get("curve") or {}).get("points"))


def is_curve_plot(image: Image) -> bool:
    return image.file.rsplit("/", 1)[-1].startswith(PLOT_PREFIX)


def offered(point: Mapping[str, Any]) -> str:
    """A stage's offered load, short: "c=8" (concurrency) or "4 req/s" (rate)."""
    value = point.get("offered")
    if value is None:
        return str(point.get("name"))
    return f"c={value:g}" if point.get("offered_kind") == "concurrency" else f"{value:g} req/s"


def stage_label(point: Mapping[str, Any]) -> str:
    """ "stage 3 (c=8)": a stage (or curve point, or knee) by index and name."""
    index = point.get("stage", point.get("index"))
    return f"stage {index} ({point.get('name')})"


def points_of(summary: Summary) -> list[dict[str, Any]]:
    """The curve's points as read from a file (an earlier loadgen's may lack a field)."""
    return cast(list[dict[str, Any]], (summary.get("curve") or {}).get("points") or [])


def knee_stage(summary: Summary) -> int | None:
    knee = (summary.get("curve") or {}).get("knee")
    return knee["stage"] if knee else None


def curve_rule(summary: Summary, name: Literal["steady_state", "knee"]) -> str:
    rules = (summary.get("curve") or {}).get("rules")
    return rules.get(name, "") if rules else ""


def point_of(summary: Summary, stage: int | None) -> dict[str, Any] | None:
    """The curve point of stage ``stage``, or None."""
    points = points_of(summary)
    return next((p for p in points if p.get("stage") == stage), None) if stage is not None else None


def knee_sentence(summary: Summary) -> str:
    c = summary.get("curve") or {}
    rule = curve_rule(summary, "knee")
    k = c.get("knee")
    if k is None and c.get("stages_with_ok") == 0:
        return "No knee: no stage had an ok request, so there is no throughput to read one from."
    if k is None:
        return (
            f"No knee: throughput kept scaling with the offered load over the "
            f"{len(c.get('points') or [])} stages measured. Rule: the knee is {rule}."
        )
    e = k.get("next_scaling")
    step = (
        "throughput grew less than half as fast as the load"
        if e is None
        else f"throughput scaled {e:.2f} with the load (1: it grew as fast)"
    )
    return (
        f"Knee: {stage_label(k)}, at {num(k.get('throughput_rps'))} req/s; from it to the next stage "
        f"{step}. Rule: the knee is {rule}."
    )


def sla_sentence(summary: Summary) -> str:
    c = summary.get("curve") or {}
    points = c.get("points") or []
    if all(p.get("sla_verdict") in (None, "none") for p in points):
        return "No SLA rules set (sla.rules), so no stage is judged against one."
    last = point_of(summary, c.get("last_stage_meeting_sla"))
    if last is None:
        return "No stage met the SLA."
    missed = [str(p["stage"]) for p in points if p["stage"] < last["stage"] and p["sla_verdict"] != "pass"]
    return (
        f"Last stage meeting the SLA: {stage_label(last)}, at {num(last.get('throughput_rps'))} req/s "
        f"with p99 TTFT {num((last.get('ttft_ms') or {}).get('p99'))} ms"
        + (f" (earlier stages that did not: {', '.join(missed)})." if missed else ".")
    )


def render_curve_plots(summary: Summary) -> list[Plot]:
    """The curve plots of a multi-stage run (none for a single stage): throughput against p50
    and p99 TTFT, TPOT and E2E; output tokens/s against the same; goodput and throughput
    against offered load."""
    if not is_multi_stage(summary):
        return []
    out = []
    for metric, label in LATENCIES:
        fig = new_figure()
        ax = fig.add_subplot()
        _latency_axes(ax, summary, "throughput_rps", metric, label)
        ax.set_xlabel("throughput (requests/s)")
        ax.set_title(f"{label} against throughput, stage by stage")
        out.append(
            Plot(
                f"{PLOT_PREFIX}{metric.removesuffix('_ms')}",
                f"{label} against throughput",
                f"p50 and p99 {label} of each stage against its throughput (labelled with its offered "
                f"load); {_legend_note(summary, metric)}",
                to_png(fig),
            )
        )
    fig = new_figure((6.4, 7.2))
    axes = fig.subplots(len(LATENCIES), 1, sharex=True)
    for ax, (metric, label) in zip(axes, LATENCIES):
        _latency_axes(ax, summary, "output_tokens_per_s", metric, label)
    axes[-1].set_xlabel("output tokens/s")
    axes[0].set_title("Latency against output tokens/s, stage by stage")
    out.append(
        Plot(
            f"{PLOT_PREFIX}output_tokens",
            "Latency against output tokens/s",
            f"p50 and p99 {', '.join(label for _, label in LATENCIES[:-1])} and {LATENCIES[-1][1]} "
            "of each stage against its output tokens/s; " + _legend_note(summary, None),
            to_png(fig),
        )
    )
    out.append(_goodput_plot(summary))
    return out


def offered_long(p: Mapping[str, Any]) -> str:
    value = p.get("offered")
    if value is None:
        return "-"
    return f"concurrency {value:g}" if p.get("offered_kind") == "concurrency" else f"{value:g} req/s"


def _legend_note(summary: Summary, metric: str | None) -> str:
    lines = (
        "horizontal lines are the SLA thresholds"
        if metric is None or thresholds(summary, (metric,))
        else "no SLA threshold is set for it"
    )
    return (
        f"{lines}; the knee and the last stage meeting the SLA are marked by vertical lines; "
        "hollow markers are stages that were not steady."
    )


def _marks(summary: Summary) -> list[tuple[str, dict[str, Any], str, str]]:
    """(legend label, point, colour, line style) of the knee and the last stage meeting the SLA."""
    c = summary.get("curve") or {}
    out = []
    knee = point_of(summary, knee_stage(summary))
    if knee is not None:
        out.append((f"knee: {offered(knee)}", knee, _KNEE, "--"))
    met = point_of(summary, c.get("last_stage_meeting_sla"))
    if met is not None:
        out.append((f"last meeting SLA: {offered(met)}", met, _MET, ":"))
    return out


def _latency_axes(ax: Axes, summary: Summary, x_key: str, metric: str, label: str) -> None:
    points = [p for p in points_of(summary) if p.get(x_key) is not None]
    ax.grid(True, color="#eeeeee")
    ys: list[float] = []
    for stat, colour, marker in _STATS:
        pts = [p for p in points if (p.get(metric) or {}).get(stat) is not None]
        x = [p[x_key] for p in pts]
        y = [p[metric][stat] for p in pts]
        ys += y
        ax.plot(x, y, "-", color=colour, lw=1.3, label=f"{label} {stat}")
        for p, xi, yi in zip(pts, x, y):
            face = colour if p.get("steady") else "white"
            ax.scatter([xi], [yi], s=26, marker=marker, facecolors=face, edgecolors=colour, zorder=3)
            if stat == "p99":
                ax.annotate(offered(p), (xi, yi), xytext=(3, 4), textcoords="offset points", fontsize=7)
    lines = thresholds(summary, (metric,))
    for i, (name, value) in enumerate(lines):
        colour = _SLO if "SLO" in name else _RULE
        ax.axhline(value, color=colour, ls=("--", "-.", ":")[i % 3], lw=1.1, label=name)
    for name, p, colour, style in _marks(summary):
        if p.get(x_key) is not None:
            ax.axvline(p[x_key], color=colour, ls=style, lw=1.1, label=name)
    values = [v for v in ys + [v for _, v in lines] if v > 0]
    if values and max(values) / min(values) > _LOG_RATIO:
        ax.set_yscale("log")
        ax.set_ylim(min(values) / 1.4, max(values) * 1.6)
    elif values:
        ax.set_ylim(0, max(values) * 1.15)
    if not ys:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")
    ax.set_ylabel(f"{label} (ms)")
    legend(ax, loc="best", fontsize=7)


def _goodput_plot(summary: Summary) -> Plot:
    c = summary["curve"]
    points = [p for p in points_of(summary) if p.get("offered") is not None]
    fig = new_figure()
    ax = fig.add_subplot()
    ax.grid(True, color="#eeeeee")
    for key, name, colour, ls, lw, marker, ms in (  # goodput dashed on throughput: both show
        ("throughput_rps", "throughput", "#9ecae1", "-", 4.0, "o", 9.0),
        ("goodput_rps", "goodput (met every SLO)", _MET, "--", 1.4, "s", 4.0),
    ):
        pts = [p for p in points if p.get(key) is not None]
        x, y = [p["offered"] for p in pts], [p[key] for p in pts]
        ax.plot(x, y, color=colour, label=name, ls=ls, lw=lw, marker=marker, ms=ms)
    offers = [float(p["offered"]) for p in points]
    if offers and min(offers) > 0 and max(offers) / min(offers) >= 8:
        ax.set_xscale("log", base=2)
        ax.set_xticks(offers, [f"{v:g}" for v in offers])
        ax.minorticks_off()
    for name, p, colour, style in _marks(summary):
        if p.get("offered") is not None:
            ax.axvline(p["offered"], color=colour, ls=style, lw=1.1, label=name)
    ax.set_ylim(bottom=0)
    kind = "concurrency" if c.get("x") == "concurrency" else "rate (requests/s)"
    ax.set_xlabel(f"offered load: {kind}")
    ax.set_ylabel("requests/s")
    ax.set_title("Throughput and goodput against offered load")
    legend(ax, loc="best", fontsize=7)
    return Plot(
        f"{PLOT_PREFIX}goodput",
        "Throughput and goodput against offered load",
        "Each stage's completed requests/s and the part of them that met every per-request SLO "
        "(goodput), against the load it offered; the knee and the last stage meeting the SLA are "
        "marked by vertical lines.",
        to_png(fig),
    )
