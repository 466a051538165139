"""The report's headline, first in every report: what a reader takes in at a glance before any
condition table. The four corners (``report.corners``: latency, throughput, quality, memory and
cost, one row each), the SLA verdict, the few numbers that answer the run's question (TTFT p50 and
p99, TPOT p50, output tokens/s, goodput and the share of requests that met every SLO; for a
multi-stage run also the stages, the knee, the last stage meeting the SLA and the capacity
when the summary has one), and the main plot: the TTFT CDF of a single stage, throughput
against TTFT of several. Numbers are read from ``summary.json`` as the other sections do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen import metric_defs
from loadgen.report.blocks import Alert, Image, Section, Table, Text, num, pct
from loadgen.report.corners import corners_table
from loadgen.report.curve import MAIN_PLOT, is_multi_stage, knee_stage, offered, point_of, stage_label
from loadgen.report.repeats import repeats_sentence, repeats_table
from loadgen.summary import Summary

TITLE = "At a glance"
SINGLE_MAIN_PLOT = "cdf_ttft"
POOLING_MAIN_PLOT = "cdf_e2e"
HEADER = (
    "measured over",
    "TTFT p50 (ms)",
    "TTFT p99 (ms)",
    "TPOT p50 (ms)",
    "requests/s",
    "output tokens/s",
    "goodput (req/s)",
    "met every SLO",
)


def main_plot(summary: Summary, plots: Sequence[Image]) -> Image | None:
    """The headline's plot among the report's plots, or None when it was not drawn (a run
    without a token stream, embeddings or rerank, has the E2E CDF instead of TTFT's)."""
    stem = MAIN_PLOT if is_multi_stage(summary) else SINGLE_MAIN_PLOT
    if stem == SINGLE_MAIN_PLOT and not metric_defs.present(summary, "ttft_ms"):
        stem = POOLING_MAIN_PLOT
    return next((p for p in plots if p.file.rsplit("/", 1)[-1] == f"{stem}.png"), None)


def headline_section(
    summary: Summary, plots: Sequence[Image] = (), cost: Mapping[str, Any] | None = None
) -> Section:
    """The four corners first (``cost``: ``cost.json``'s content, None without a GPU price),
    then the verdict, the numbers, a sentence and the main plot."""
    blocks: list = [corners_table(summary, cost), verdict_alert(summary), numbers_table(summary)]
    if is_multi_stage(summary):
        blocks.append(Text(stages_sentence(summary)))
    else:
        c = summary.get("counts") or {}
        blocks.append(
            Text(
                f"{c.get('sent', 0)} measured requests ({c.get('ok', 0)} ok, {c.get('failed', 0)} failed) "
                f"over {num((summary.get('window') or {}).get('seconds'))} s; the sections below give the "
                "conditions and every figure."
            )
        )
    over_repeats = repeats_table(summary)
    if over_repeats is not None:
        blocks += [over_repeats, Text(repeats_sentence(summary))]
    image = main_plot(summary, plots)
    if image is not None:
        blocks.append(image)
    return Section(TITLE, tuple(blocks))


def verdict_alert(summary: Summary) -> Alert:
    sla = summary.get("sla") or {}
    verdict = sla.get("verdict") or "none"
    if verdict == "none":
        alert = Alert("warning", "SLA: NONE", "no run-level rule was set (sla.rules).")
    elif verdict == "incomplete":
        reason = summary.get("incomplete_reason") or "the run stopped early"
        alert = Alert("warning", "SLA: INCOMPLETE", f"{reason}; no verdict is given.")
    elif verdict == "pass":
        alert = Alert("ok", "SLA: PASS", f"every rule met: {', '.join(sla.get('rules') or [])}.")
    else:
        failed = [
            str(d["reason"])
            if d.get("max_error_rate")
            else d["rule"] + (" (no data)" if d.get("value") is None else f" (measured {d['value']:.4g})")
            for d in sla.get("details") or []
            if not d.get("passed")
        ]
        alert = Alert("error", f"SLA: {str(verdict).upper()}", f"failed: {'; '.join(failed)}.")
    if is_multi_stage(summary) and verdict != "none":
        points = summary["curve"]["points"]
        met = sum(p.get("sla_verdict") == "pass" for p in points)
        text = (
            f"{alert.text} The verdict pools all {len(points)} stages; {met} of {len(points)} met it alone."
        )
        alert = Alert(alert.level, alert.title, text)
    return alert


def numbers_table(summary: Summary) -> Table:
    """The run's figures in one row; a multi-stage run adds the knee's and the last stage
    meeting the SLA's, each on its own window."""
    m: Mapping[str, Any] = summary.get("metrics") or {}
    goodput = m.get("goodput") or {}
    multi = is_multi_stage(summary)
    if not multi and "ttft_ms" not in m:
        return _pooling_numbers(m, goodput)
    rows = [
        (
            f"all {len(summary['stages'])} stages pooled" if multi else "the run",
            num((m.get("ttft_ms") or {}).get("p50")),
            num((m.get("ttft_ms") or {}).get("p99")),
            num((m.get("tpot_ms") or {}).get("p50")),
            num(m.get("request_throughput_rps")),
            num(m.get("output_tokens_per_s")),
            num(goodput.get("requests_per_s")),
            pct(goodput.get("attained_fraction")),
        )
    ]
    if multi:
        c = summary["curve"]
        for what, stage in (
            ("knee", knee_stage(summary)),
            ("last meeting SLA", c.get("last_stage_meeting_sla")),
        ):
            p = point_of(summary, stage)
            if p is not None:
                rows.append(
                    (
                        f"{what}: {stage_label(p)}",
                        num((p.get("ttft_ms") or {}).get("p50")),
                        num((p.get("ttft_ms") or {}).get("p99")),
                        num((p.get("tpot_ms") or {}).get("p50")),
                        num(p.get("throughput_rps")),
                        num(p.get("output_tokens_per_s")),
                        num(p.get("goodput_rps")),
                        pct(p.get("attained_fraction")),
                    )
                )
    return Table(HEADER, tuple(rows), "l" + "r" * (len(HEADER) - 1))


# A run without a token stream (embeddings, rerank): request latency and items/s, no empty TTFT.
POOLING_HEADER = (
    "measured over",
    "E2E p50 (ms)",
    "E2E p99 (ms)",
    "requests/s",
    "items/s",
    "input tokens/s",
    "goodput (req/s)",
    "met every SLO",
)


def _pooling_numbers(m: Mapping[str, Any], goodput: Mapping[str, Any]) -> Table:
    e2e = m.get("e2e_ms") or {}
    row = (
        "the run",
        num(e2e.get("p50")),
        num(e2e.get("p99")),
        num(m.get("request_throughput_rps")),
        num(m.get("items_per_s")),
        num(m.get("input_tokens_per_s")),
        num(goodput.get("requests_per_s")),
        pct(goodput.get("attained_fraction")),
    )
    return Table(POOLING_HEADER, (row,), "l" + "r" * (len(POOLING_HEADER) - 1))


def stages_sentence(summary: Summary) -> str:
    c = summary["curve"]
    points = c["points"]
    parts = [f"{len(points)} load stages, {offered(points[0])} to {offered(points[-1])}."]
    k = point_of(summary, knee_stage(summary))
    parts.append(
        f"Knee: {stage_label(k)} at {num(k.get('throughput_rps'))} req/s."
        if k is not None
        else "No knee: p99 TTFT never grew faster than throughput."
    )
    met = point_of(summary, c.get("last_stage_meeting_sla"))
    if met is not None:
        tput = num(met.get("throughput_rps"))
        parts.append(f"Last stage meeting the SLA: {stage_label(met)} at {tput} req/s.")
    elif any(p.get("sla_verdict") not in (None, "none") for p in points):
        parts.append("No stage met the SLA.")
    parts.append(capacity_sentence(summary.get("capacity")))
    return " ".join(p for p in parts if p)


def capacity_sentence(capacity: Any) -> str:
    """The run's capacity (``summary["capacity"]``) with its 95% interval; "" when absent."""
    if not isinstance(capacity, Mapping):
        return ""
    rps = capacity.get("capacity_rps")
    if rps is None:
        reason = (
            capacity.get("unconfirmed_because") or capacity.get("reason") or capacity.get("stopped_because")
        )
        return "Capacity: not confirmed" + (f" ({reason})." if reason else ".")
    if capacity.get("statement"):  # a confirmed rate says what it stands for
        return f"Capacity: {capacity['statement']}."
    ci = capacity.get("ci95")
    interval = (
        f" (95% CI {num(ci[0])} to {num(ci[1])})"
        if isinstance(ci, Sequence) and len(ci) == 2 and None not in ci
        else ""
    )
    method = capacity.get("method")
    return f"Capacity: {num(rps)} req/s{interval}" + (f", by {method}." if method else ".")
