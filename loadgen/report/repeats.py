"""A repeated run's headline figures over its repeats (``summary["repeats"]``): one row per
figure, each repeat's value, the mean, the sd and the between-repeat interval. One table for
the report's headline, the console (``cli.console``) and compare, so the three agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen import metric_defs
from loadgen.report.blocks import Table


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
    """``"[12.1, 13.4]"`` or "-" (fewer than 2 repeats had the figure)."""
    if fig.get("low") is None or fig.get("high") is None:
        return "-"
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
