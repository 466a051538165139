"""The "Load stages" section of a multi-stage run's report: the stage table (with each stage's
steady-state and over-saturation verdicts), the knee, the last stage meeting the SLA, and an
alert per stage that cannot be trusted or could not be sustained."""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.analysis.saturation import queue_word
from loadgen.report.blocks import Alert, Image, Section, Table, Text, num
from loadgen.report.curve import (
    HEADLINE,
    LATENCIES,
    MAIN_PLOT,
    curve_rule,
    is_curve_plot,
    is_multi_stage,
    knee_sentence,
    offered_long,
    point_of,
    sla_sentence,
)
from loadgen.summary import StageSummary, Summary


def stages_sections(summary: Summary, plots: Sequence[Image] = ()) -> list[Section]:
    """The "Load stages" section of a multi-stage run (none for a single stage): the stage
    table, the knee and the last stage meeting the SLA, an alert per unsteady or over-saturated
    stage, and the curve plots (but the headline's)."""
    if not is_multi_stage(summary):
        return []
    rows = [_row(summary, s) for s in summary["stages"]]
    header = (
        "stage",
        "offered load",
        "sent / ok / failed",
        "req/s",
        "output tok/s",
        f"{LATENCIES[0][1]} p50",
        *(f"{label} p99" for _, label in LATENCIES),
        "goodput req/s",
        "SLA",
        "steady",
        "queue",
    )
    blocks: list = [Table(header, tuple(rows), "llrrr" + "r" * (len(LATENCIES) + 2) + "lll")]
    blocks.append(
        Text(
            "Each stage on its own measured window (its warm-up and ramp excluded); latencies in ms. "
            f"Steady means {curve_rule(summary, 'steady_state')}. Queue: whether the "
            f"stage was over-saturated ({saturation_rule(summary)})."
        )
    )
    blocks += [Text(knee_sentence(summary)), Text(sla_sentence(summary))]
    for s in summary["stages"]:
        steady = s.get("steady_state") or {}
        if not steady.get("steady"):
            blocks.append(
                Alert(
                    "warning",
                    f"stage {s.get('name')} too short or unstable to mean anything:",
                    f"{steady.get('reason') or 'not steady'}.",
                )
            )
    blocks += saturation_alerts(summary)
    blocks += [p for p in plots if is_curve_plot(p) and not p.file.endswith(f"/{MAIN_PLOT}.png")]
    return [Section("Load stages", tuple(blocks))]


def _row(summary: Summary, s: StageSummary) -> tuple[str, ...]:
    """One stage's row of the table: its load, counts, throughput, latency tails and verdicts."""
    p = point_of(summary, s.get("index")) or {}
    counts = s.get("counts") or {}
    lat = {k: p.get(k) or {} for k, _ in LATENCIES}
    verdict = str(p.get("sla_verdict") or (s.get("sla") or {}).get("verdict") or "none")
    sat = s.get("saturation")
    return (
        f"{s.get('index')} ({s.get('name')})",
        offered_long(p) if p else "-",
        f"{counts.get('sent', 0)} / {counts.get('ok', 0)} / {counts.get('failed', 0)}",
        num(p.get("throughput_rps")),
        num(p.get("output_tokens_per_s")),
        num(lat[HEADLINE].get("p50")),
        *(num(lat[k].get("p99")) for k, _ in LATENCIES),
        num(p.get("goodput_rps")),
        verdict.upper() if verdict == "fail" else verdict,
        "yes" if (s.get("steady_state") or {}).get("steady") else "no",
        _queue(sat["verdict"] if sat is not None else None),
    )


def _queue(verdict: str | None) -> str:
    """The queue column (analysis/saturation.py's words), a growing queue in capitals like FAIL."""
    word = queue_word(verdict)
    return word.upper() if verdict == "over_saturated" else word


def saturation_rule(summary: Summary) -> str:
    """The over-saturation rule in words, as the stages carry it."""
    for s in summary.get("stages") or []:
        sat = s.get("saturation")
        if sat is not None:
            return sat["rule"]
    return "not judged: a summary written before the verdict existed"


def saturation_alerts(summary: Summary) -> list[Alert]:
    """One alert per over-saturated stage: its queue grew while it ran, so a longer run at that
    load would miss the SLOs it may have met."""
    out = []
    for s in summary.get("stages") or []:
        sat = s.get("saturation")
        if sat is not None and sat["verdict"] == "over_saturated":
            out.append(
                Alert(
                    "error",
                    f"stage {s.get('name')} over-saturated:",
                    f"{sat['reason']}; the server fell behind the load, so its figures hold a "
                    "backlog that a longer stage would grow.",
                )
            )
    return out
