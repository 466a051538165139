"""A repeated run's headline figures over its repeats (``summary["repeats"]``): one row per
figure, each repeat's value, the mean, the sd and the between-repeat interval. One table for
the report's headline, the console (``cli.console``) and compare, so the three agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen import metric_defs
from loadgen.analysis.repeats import HEADLINE, TOO_FEW, bounded, figure_name, welch_ratio
from loadgen.report.blocks import Table

CONF_WORD = "95% Welch t"


def value(metric: str, v: float | None) -> str:
    """A figure's value at its registry precision; a fraction as a percentage; "-" when absent."""
    if v is None:
        return "-"
    d = metric_defs.BY_NAME.get(metric)
    if d is not None and d.unit == "fraction":
        return f"{v:.{d.digits}%}"
    digits = 1 if d is None else d.digits
    return f"{v:,.{digits}f}"


def interval_text(fig: Mapping[str, Any]) -> str:
    """``"[12.1, 13.4]"``, "too few repeats to bound" (2 repeats had the figure), or "-"."""
    if not bounded(fig):
        return TOO_FEW if (fig.get("n") or 0) > 1 else "-"
    return f"[{value(fig['metric'], fig['low'])}, {value(fig['metric'], fig['high'])}]"


def repeats_table(summary: Mapping[str, Any]) -> Table | None:
    """The figures over the repeats, or None for a run without repeats."""
    block = summary.get("repeats")
    if not isinstance(block, Mapping) or not block.get("figures"):
        return None
    names = [r["path"] for r in block["runs"]]
    conf = f"{block['confidence']:.0%} interval"
    header = ("figure", *names, "mean", "sd", conf)
    rows = tuple(
        (
            f["figure"],
            *(value(f["metric"], v) for v in f["values"]),
            value(f["metric"], f["mean"]),
            value(f["metric"], f["sd"]),
            interval_text(f),
        )
        for f in block["figures"]
    )
    return Table(header, rows, "l" + "r" * (len(header) - 1))


def repeats_sentence(summary: Mapping[str, Any]) -> str:
    """What the table is, in one sentence ("" without repeats)."""
    block = summary.get("repeats")
    if not isinstance(block, Mapping):
        return ""
    return (
        f"The same load {block['count']} times ({block['completed']} ran to the end; same seed, same "
        f"schedule, fresh connections): each repeat's figure, their mean, and {block['method']}. "
        "The figures above pool every repeat's requests."
    )


def compare_table(names: list[str], summaries: list[Mapping[str, Any]]) -> Table | None:
    """compare's rows over repeats (when any run has them): each run's mean over its repeats
    with its interval (a run without repeats: its one value), and each later run's ratio to the
    first with Welch's t interval (``analysis.repeats.welch_ratio``; a run without repeats
    counts as exact)."""
    blocks = [s.get("repeats") if isinstance(s.get("repeats"), Mapping) else None for s in summaries]
    if not any(blocks):
        return None
    ref = names[0]
    header = ("figure", *names, *(f"{n} / {ref} ({CONF_WORD})" for n in names[1:]))
    rows = []
    for metric, stat in HEADLINE:
        if not any(metric_defs.present(s, metric) for s in summaries):
            continue  # a metric of no run's protocol (TTFT of embeddings runs): no empty row
        cells, values = [], []
        for s, block in zip(summaries, blocks):
            fig = _figure(block, metric, stat)
            if fig is None:
                one = metric_defs.lookup(dict(s), metric, stat)
                cells.append(value(metric, one) + (" (1 run)" if one is not None else ""))
                values.append(one)
            else:
                cells.append(f"{value(metric, fig['mean'])} {interval_text(fig)}")
                values.append([v for v in fig["values"] if v is not None])
        ratios = [_ratio(values[0], v) for v in values[1:]]
        rows.append((figure_name(metric, stat), *cells, *ratios))
    return Table(header, tuple(rows), "l" + "r" * (len(header) - 1))


def _figure(block: Mapping[str, Any] | None, metric: str, stat: str | None) -> Mapping[str, Any] | None:
    if block is None:
        return None
    return next((f for f in block["figures"] if f["metric"] == metric and f["stat"] == stat), None)


def _ratio(base: Any, cand: Any) -> str:
    """``"1.02 [0.97, 1.07]"``: candidate / baseline with its interval; "-" when undefined."""
    if base is None or cand is None:
        return "-"
    if not isinstance(cand, list):  # one run: its value over the baseline's (mean), no interval
        b = sum(base) / len(base) if isinstance(base, list) and base else base
        return f"{cand / b:.3f}" if isinstance(b, (int, float)) and b else "-"
    b = base if isinstance(base, list) else float(base)
    r = welch_ratio(cand, b)
    return "-" if r is None else f"{r.estimate:.3f} [{r.low:.3f}, {r.high:.3f}]"
