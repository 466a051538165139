"""Render a Comparison: compare.md, compare.json and overlaid CDF plots (matplotlib, Agg); for
multi-stage runs also the capacity table and the overlaid load curves (``report.compare_curves``).
Output agreement comes right after the runs table, before any latency: whether the runs said
the same thing decides whether their speeds are worth comparing at all.

Figures are built as ``matplotlib.figure.Figure`` objects (no pyplot state), so this works
headless and from several threads, and a notebook can show them directly.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from loadgen import metric_defs
from loadgen.analysis.compare import FIDELITY_VERDICT_ROW, Comparison
from loadgen.analysis.compare_peers import NOT_RECORDED, PER_STAGE
from loadgen.analysis.sla import failures_said
from loadgen.report import compare_curves, repeats
from loadgen.report.plots import legend

KEEP_ANSWERS = "`--keep-answers` (profile: `output.answers.keep: true`)"


def _title(metric: str) -> str:
    return metric_defs.get(metric).plot_title


def fmt(value: Any) -> str:
    """A number for a table: 4 significant digits, integers as integers, missing as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if isinstance(value, (int, float)) and float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.3g}"
    if isinstance(value, dict):  # a realised length distribution
        return " ".join(f"{k} {fmt(v)}" for k, v in value.items() if k in ("mean", "p50", "p99"))
    return str(value)


def fmt_rel(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:+.1%}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _tokens(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _value_cell(value: Any, row: str, points: int) -> str:
    """A table cell; a percentile a peer file of several load points does not pool reads
    ``PER_STAGE`` rather than a dash that would say the tool never measured it."""
    stat = row.partition(" ")[2]
    if points > 1 and stat.startswith("p") and fmt(value) == "—":
        return PER_STAGE
    return fmt(value)


def agreement_line(a: dict[str, Any]) -> str:
    """One run's output agreement with the reference, as the console shows it:
    ``output agreement 97.5 % (39 of 40 identical; mean common prefix 57.3 of 60 tokens)``."""
    if a["agreement"] is None:
        return (
            f"output agreement: not measured: no prompt was sent identically by both runs "
            f"({a['prompts_differ']} differed, {a['only_in_one']} in one run only)"
        )
    return (
        f"output agreement {a['agreement'] * 100:.1f} % ({a['identical']} of {a['compared']} identical; "
        f"mean common prefix {_tokens(a['mean_common_prefix_tokens'])} of "
        f"{_tokens(a['mean_answer_tokens'])} tokens)"
    )


def agreement_lines(cmp: Comparison) -> list[str]:
    """The "Output agreement" section: per later run its line against the reference, what was
    not compared, and its first differences; a line saying why not where a run kept no answers."""
    ref = cmp.names[0]
    lines = [f"## Output agreement (answers compared with {ref}'s, prompt by prompt)", ""]
    missing = [n for n, k in zip(cmp.names, cmp.answers_kept) if not k]
    if missing:
        who = "no run kept its" if len(missing) == len(cmp.names) else f"{', '.join(missing)} kept no"
        lines += [
            f"output agreement: not measured: {who} answers; run with {KEEP_ANSWERS} to compare "
            "what the runs said",
            "",
        ]
    for name, a in zip(cmp.names[1:], cmp.agreements):
        if a is None:
            continue
        lines += [(f"{name}: " if len(cmp.names) > 2 else "") + agreement_line(a), ""]
        skipped = [
            f"{n} {what}"
            for n, what in (
                (a["prompts_differ"], "sent a different prompt (not compared)"),
                (a["only_in_one"], "in one run only (not compared)"),
                (a["truncated"], "compared on what was kept (answer cut at the run's max_chars)"),
            )
            if n
        ]
        if skipped:
            lines += ["Requests: " + "; ".join(skipped) + ".", ""]
        if a["first_differences"]:
            lines += [f"| id | {_cell(ref)} | {_cell(name)} |", "|---|---|---|"]
            lines += [f"| {d['id']} | {_cell(d['a'])} | {_cell(d['b'])} |" for d in a["first_differences"]]
            lines.append("")
    return lines


def repeats_lines(cmp: Comparison) -> list[str]:
    """The headline figures over repeats, when some run has them (``report.repeats``)."""
    table = repeats.compare_table(list(cmp.names), list(cmp.summaries))
    if table is None:
        return []
    lines = [
        "## Over repeats",
        "",
        "Each run's mean over its repeats with its 95% Student t interval (a run without repeats: its "
        "one value); the ratios' intervals are Welch's t over both runs' repeats.",
        "",
        "| " + " | ".join(map(_cell, table.header)) + " |",
        "|" + "---|" * len(table.header),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return [*lines, ""]


def definition_lines(cmp: Comparison) -> list[str]:
    """The "Definitions that differ" section: for each run read from another tool's result file,
    the tool, the file and each sentence saying where its definitions differ from loadgen's."""
    lines: list[str] = []
    for name, peer in zip(cmp.names, cmp.peer_of()):
        if peer is None:
            continue
        if not lines:
            lines = ["## Definitions that differ", ""]
        lines += [
            f"{name} is a results file of {peer.source.removesuffix(' (results file)')} (`{peer.path}`); "
            "each of its figures is on the row of the loadgen metric with the same definition, "
            "and where that definition still differs from loadgen's (docs/metrics.md):",
            "",
            *(f"- {d}" for d in peer.definitions),
            "",
        ]
    return lines


def error_lines(cmp: Comparison) -> list[str]:
    """The failed requests of each run that had any, with the server's own message a class and
    the fix for a known refusal: a comparison's failures say why, not only how many."""
    out = ((name, failures_said(s.get("counts") or {})) for name, s in zip(cmp.names, cmp.summaries))
    lines = [f"- **{_cell(name)}**: {_cell(text)}" for name, text in out if text]
    return ["## Failed requests", "", *lines, ""] if lines else []


def markdown(cmp: Comparison) -> str:
    names, ref = cmp.names, cmp.names[0]
    lines = [f"# loadgen compare: {' vs '.join(names)}", ""]
    for w in cmp.warnings:
        lines.append(f"> **Warning:** {w}")
        lines.append(">")
    if cmp.warnings:
        lines[-1] = ""
    lines += ["| run | path | started | sent | ok | failed | SLA |", "|---|---|---|---|---|---|---|"]
    for n, p, s in zip(names, cmp.paths, cmp.summaries):
        c = s.get("counts") or {}
        lines.append(
            f"| {_cell(n)} | {_cell(str(p))} | {s.get('started_at', '—')} | {c.get('sent')} "
            f"| {c.get('ok')} | {c.get('failed')} | {(s.get('sla') or {}).get('verdict', '—')} |"
        )
    lines += ["", *error_lines(cmp), *agreement_lines(cmp)]
    head = ["metric", *names, *(f"{n} vs {ref}" for n in names[1:])]
    lines += [
        f"## Metrics (relative difference to {ref})",
        "",
        "| " + " | ".join(map(_cell, head)) + " |",
        "|" + "---|" * len(head),
    ]
    points = {n: p.points if p else 1 for n, p in zip(names, cmp.peer_of())}
    for row in cmp.table.index:
        cells = [
            row,
            *(_value_cell(cmp.table.at[row, n], row, points[n]) for n in names),
            *(fmt_rel(cmp.relative.at[row, n]) for n in names[1:]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    verdicts = cmp.fidelity_verdicts
    if verdicts is not None:
        cells = [FIDELITY_VERDICT_ROW, *(fmt(verdicts[n]) for n in names), *("—" for _ in names[1:])]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += definition_lines(cmp)
    if cmp.curves is not None:
        lines += compare_curves.capacity_lines(cmp.curves)
    lines += repeats_lines(cmp)
    lines += ["## Conditions that differ", ""]
    if cmp.conditions:
        lines += ["| field | " + " | ".join(map(_cell, names)) + " |", "|" + "---|" * (len(names) + 1)]
        for d in cmp.conditions:
            lines.append(f"| {d.field} | " + " | ".join(_cell(fmt(v)) for v in d.values) + " |")
    else:
        lines.append("None: the runs were measured under the same recorded conditions.")
    lines += [
        "",
        "Not compared: the run name and output location (`profile.name`, "
        "`profile.output.*`); `profile.*` fields also recorded under an effective name "
        "are listed once, under that name."
        + (
            " A results file of another tool states few conditions: a field it does not record "
            f"reads {NOT_RECORDED} and is compared among the runs that record it."
            if any(cmp.peer_of())
            else ""
        ),
        "",
        "## Distributions",
        "",
    ]
    lines += [f"![{_title(m)} CDF](cdf_{m}.png)" for m in cmp.latencies]
    if cmp.curves is not None:
        lines += compare_curves.curve_image_lines(cmp.curves)
    return "\n".join(lines) + "\n"


def cdf_figures(cmp: Comparison) -> dict[str, Any]:
    """{metric: Figure}: the empirical CDF of each latency, one line per run."""
    from matplotlib.figure import Figure

    figures = {}
    for metric, by_run in cmp.cdfs().items():
        fig = Figure(figsize=(7, 4.2), dpi=100)
        ax = fig.add_subplot()
        for name, (x, y, n) in by_run.items():
            if n:
                ax.step(x, y, where="post", label=f"{name} (n={n})")
        ax.set_xlabel(f"{_title(metric)} ({metric_defs.get(metric).unit})")
        ax.set_ylabel("fraction of samples ≤ x")
        ax.set_title(f"{_title(metric)}: empirical CDF")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3)
        legend(ax, loc="lower right", fontsize="small")
        fig.tight_layout()
        figures[metric] = fig
    return figures


def write(cmp: Comparison, out_dir: str | Path) -> list[Path]:
    """Write compare.md, compare.json and cdf_<metric>.png (and, for multi-stage runs,
    curve_<metric>.png) into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for metric, fig in cdf_figures(cmp).items():
        path = out / f"cdf_{metric}.png"
        fig.savefig(path)
        written.append(path)
    if cmp.curves is not None:
        written += compare_curves.write_curves(cmp.curves, out)
    (out / "compare.md").write_text(markdown(cmp))
    (out / "compare.json").write_bytes(cmp.to_json())
    return [out / "compare.md", out / "compare.json", *written]
