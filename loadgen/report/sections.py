"""The report, section by section, from a run's summary, its cost figures and its plots.

Order: the headline (opening with the four corners), alerts, conditions, SLA verdict and
goodput, stages (multi-stage runs), latency table, speculative decoding (when the server
reports it), sessions (multi-turn runs only), models (LoRA mixes only), media
(runs with images or audio only), precision (runs with load.until only), throughput, errors,
client health, measurement fidelity (simulator runs only), the server's view, Little's law,
the GPUs, cost, plots; ``REPORT`` holds that order, keyed by the summary's block names.
The client's health and Little's law are ``client_health.py``'s. Every number here is read
from ``summary.json`` (or ``cost.json``); nothing is recomputed, so the report and the result
file cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen import metric_defs
from loadgen.report.agentic import agentic_section
from loadgen.report.blocks import Alert, Image, Section, Table, Text, num, pct
from loadgen.report.client_health import LITTLE_TOLERANCE, client_section, littles_law_section, warning_text
from loadgen.report.conditions import conditions_section
from loadgen.report.cost import cost_section
from loadgen.report.curve import is_curve_plot
from loadgen.report.fidelity import fidelity_sections
from loadgen.report.headline import headline_section, main_plot
from loadgen.report.media import media_section
from loadgen.report.models import models_section
from loadgen.report.phases import phases_section
from loadgen.report.replicas import replicas_section
from loadgen.report.server import PLOT_NAME as SERVER_PLOT
from loadgen.report.server import server_section
from loadgen.report.speculative import speculative_section
from loadgen.report.stages import stages_sections
from loadgen.report.telemetry import telemetry_section
from loadgen.report.telemetry_plot import PLOT_NAME as GPU_PLOT
from loadgen.report.traffic import sessions_section, with_traffic
from loadgen.summary import Summary

# The client's health and Little's law (client_health.py) stay importable from here.
__all__ = [
    "LATENCY_ROWS",
    "LATENCY_STATS",
    "LITTLE_TOLERANCE",
    "build_sections",
    "client_section",
    "cost_section",
    "errors_section",
    "latency_section",
    "latency_table",
    "littles_law_section",
    "precision_section",
    "resent_alert",
    "scalar_rows",
    "sla_section",
    "throughput_section",
    "top_alerts",
]

# (label, metric) of each row of the latency table: the registry's distributions shown there.
LATENCY_ROWS: tuple[tuple[str, str], ...] = tuple(
    (d.label, d.name) for d in metric_defs.DISTRIBUTIONS if d.report == "latency"
)
LATENCY_STATS: tuple[str, ...] = metric_defs.TABLE_STATS


@dataclass(frozen=True)
class _Inputs:
    """What a section is drawn from: the summary, the cost figures, and the plots by kind."""

    summary: Summary
    cost: dict | None
    server_plots: tuple[Image, ...]
    gpu_plots: tuple[Image, ...]
    curve_plots: tuple[Image, ...]


def _some(section: Section | None) -> list[Section]:
    return [] if section is None else [section]


# The report after its headline and alerts, in order: the core sections (always drawn) and, by
# the names of the summary's blocks (runner/blocks.py), each block's sections, drawn when the
# summary has it.
REPORT: tuple[tuple[str, Callable[[_Inputs], list[Section]]], ...] = (
    ("conditions", lambda i: [with_traffic(conditions_section(i.summary), i.summary)]),
    ("sla", lambda i: [sla_section(i.summary)]),
    ("stages", lambda i: list(stages_sections(i.summary, i.curve_plots))),
    ("latency", lambda i: [latency_section(i.summary)]),
    ("speculative", lambda i: _some(speculative_section(i.summary))),
    ("sessions", lambda i: _some(sessions_section(i.summary))),
    ("agentic", lambda i: _some(agentic_section(i.summary))),
    ("models", lambda i: _some(models_section(i.summary))),
    ("replicas", lambda i: _some(replicas_section(i.summary))),
    ("media", lambda i: _some(media_section(i.summary))),
    ("precision", lambda i: [precision_section(i.summary)]),
    ("throughput", lambda i: [throughput_section(i.summary)]),
    ("errors", lambda i: [errors_section(i.summary)]),
    ("client", lambda i: [client_section(i.summary)]),
    ("http_phases", lambda i: _some(phases_section(i.summary))),
    ("fidelity", lambda i: list(fidelity_sections(i.summary))),
    ("server", lambda i: [server_section(i.summary, i.server_plots)]),
    ("littles_law", lambda i: [littles_law_section(i.summary)]),
    ("telemetry", lambda i: _some(telemetry_section(i.summary, i.gpu_plots))),
    ("cost", lambda i: [cost_section(i.cost)]),
)
CORE = frozenset({"conditions", "sla", "latency", "throughput", "errors", "client", "littles_law", "cost"})
# Blocks whose section is drawn without them too: it says why the run has none ("Not scraped").
SAYS_WHY_ABSENT = frozenset({"server", "telemetry"})
# Blocks drawn inside another section, and where.
NOT_SHOWN: dict[str, str] = {
    "curve": "in the stages' sections (the curve's plots and table) and the headline",
    "capacity": "in the headline (its sentence)",
    "quality": "in the headline's four corners",
    "repeats": "in the headline (its table and sentence)",
}


def build_sections(summary: Summary, cost: dict | None, plots: Sequence[Image]) -> list[Section]:
    # The headline first (every report), then alerts, then ``REPORT``'s entries.
    alerts = top_alerts(summary)
    out = [headline_section(summary, plots, cost)]
    out += [Section("Alerts", tuple(alerts))] if alerts else []
    server_plots = tuple(p for p in plots if p.file.endswith(f"/{SERVER_PLOT}.png"))
    gpu_plots = tuple(p for p in plots if p.file.endswith(f"/{GPU_PLOT}.png"))
    curve_plots = tuple(p for p in plots if is_curve_plot(p))
    inputs = _Inputs(summary, cost, server_plots, gpu_plots, curve_plots)
    for name, draw in REPORT:
        if name in CORE or name in SAYS_WHY_ABSENT or name in summary:
            out += draw(inputs)
    shown = (*server_plots, *gpu_plots, *curve_plots, main_plot(summary, plots))
    out.append(Section("Plots", tuple(p for p in plots if p not in shown)))
    return out


def precision_section(summary: Summary) -> Section:
    """What ``load.until`` asked for and what the run reached: the estimate, its 95 % interval
    and its half-width against the target."""
    p = summary["precision"]
    half = "-" if p["half_width"] is None else pct(p["half_width"])
    said = (
        f"load.until: {p['until']} was {'reached' if p['reached'] else 'not reached'}: estimate "
        f"{num(p['estimate'])} ms, 95 % interval {num(p['low'])}-{num(p['high'])} over {p['samples']} "
        f"requests, half-width {half} (target {pct(p['target_half_width'])})."
    )
    return Section("Precision", (Text(said),))


def top_alerts(summary: Summary) -> list[Alert]:
    """What a reader must see before any number: the client limited the run, or it was cut short."""
    out = []
    for w in (summary.get("client") or {}).get("warnings") or []:
        out.append(Alert("warning", f"{w.get('warning')}:", warning_text(w)))
    if not summary.get("complete", not summary.get("interrupted")):
        out.append(
            Alert(
                "warning",
                "incomplete:",
                f"{summary.get('incomplete_reason') or 'stopped early'}; "
                "the figures cover the requests that finished, and no SLA verdict is given.",
            )
        )
    zero = ((summary.get("counts") or {}).get("anomalies") or {}).get("zero_output_tokens")
    if zero:
        out.append(
            Alert(
                "warning",
                "anomaly:",
                f"{zero} request(s) ended normally without a single "
                "output token; they count as ok, but no answer was streamed.",
            )
        )
    tls = ((summary.get("conditions") or {}).get("target") or {}).get("tls") or {}
    if tls.get("verify") is False:
        out.append(
            Alert(
                "warning",
                "TLS not verified:",
                "target.verify_tls was false: any certificate "
                "was accepted, so the server's identity is unproven.",
            )
        )
    return out


def sla_section(summary: Summary) -> Section:
    sla = summary.get("sla") or {}
    verdict = sla.get("verdict", "none")
    blocks: list = []
    if verdict == "none":
        blocks.append(Alert("warning", "SLA verdict: NONE", "no run-level rule was set (sla.rules)."))
    else:
        blocks.append(Alert("ok" if verdict == "pass" else "error", f"SLA verdict: {verdict.upper()}"))
        rows = tuple(
            (
                d["rule"],
                "no data" if d.get("value") is None else f"{d['value']:.4g}",
                ("pass" if d["passed"] else "FAIL") + (f" ({d['reason']})" if d.get("reason") else ""),
            )
            for d in sla.get("details") or []
        )
        blocks.append(Table(("rule", "measured", "result"), rows, "lrl"))
    slos = sla.get("slos") or {}
    slo_text = ", ".join(f"{k} <= {v:g} ms" for k, v in slos.items()) or "none set: every ok request counts"
    blocks.append(
        Table(("goodput", "value"), (("per-request SLOs", slo_text), *scalar_rows(summary, "goodput")), "lr")
    )
    return Section("SLA and goodput", tuple(blocks))


def latency_table(summary: Summary) -> Table:
    """A row per distribution of the registry's latency table; the ones measured from the
    scheduled send only where they differ from their send-based twins (``table_shows``)."""
    rows = []
    for label, key in LATENCY_ROWS:
        if not metric_defs.table_shows(summary, metric_defs.get(key)):
            continue
        d = metric_defs.lookup(summary, key) or {}
        rows.append((label, str(d.get("count", 0)), *(num(d.get(s)) for s in LATENCY_STATS)))
    header = ("metric (ms)", "n", *(s.replace("_", ".") for s in LATENCY_STATS))
    return Table(header, tuple(rows), "l" + "r" * (len(header) - 1))


def scalar_rows(summary: Summary, table: str) -> tuple[tuple[str, str], ...]:
    """(label, value) of each run scalar the registry shows in the report's ``table`` that the
    summary has (a run without a token stream has no output tokens/s)."""

    def shown(d: metric_defs.MetricDef) -> str:
        value = metric_defs.lookup(summary, d.name)
        return pct(value) if d.unit == "fraction" else num(value)

    return tuple(
        (d.label, shown(d))
        for d in metric_defs.RUN_SCALARS
        if d.report == table and metric_defs.present(summary, d.name)
    )


def latency_section(summary: Summary) -> Section:
    table = latency_table(summary)
    failed = (summary.get("counts") or {}).get("failed") or 0
    lead = (
        f"Of the ok requests only ({failed} failed and have no latency here), warm-up excluded."
        if failed
        else "Measured ok requests, warm-up excluded."
    )
    if metric_defs.present(summary, "ttft_ms"):
        text = (
            lead + " TTFT: first token-bearing event minus send; TTFB: "
            "first byte; ITL per chunk: gaps between events; ITL per token: each gap divided among the "
            "tokens its event carried; TPOT: (last event - first event) / (output tokens - 1); E2E: "
            "end of stream minus send."
        )
    else:  # a pooling protocol (embeddings, rerank): one answer, read whole
        text = lead + " E2E: the whole answer read minus send (the answer is not streamed)."
    from_sched = {label for label, key in LATENCY_ROWS if metric_defs.get(key).same_as}
    if any(row[0] in from_sched for row in table.rows):
        text += (
            ' The rows "from schedule" are measured from the time the schedule wanted the request '
            "sent instead of its send, so they include the time the request waited to be sent (client "
            "lag: the coordinated omission the send-based figures leave out); each is shown only when "
            f"it differs from its send-based row (some figure by more than "
            f"{metric_defs.SAME_WITHIN_FRACTION:.0%} and {metric_defs.SAME_WITHIN_MS:g} ms)."
        )
    return Section("Latency", (table, Text(text)))


def throughput_section(summary: Summary) -> Section:
    c = summary.get("counts") or {}
    rows = (
        *scalar_rows(summary, "throughput"),
        (
            "requests",
            f"sent {c.get('sent')}, ok {c.get('ok')}, failed {c.get('failed')}, "
            f"cancelled {c.get('cancelled')} (+{c.get('warmup', 0)} warm-up, excluded)",
        ),
    )
    return Section(
        "Throughput",
        (
            Table(("throughput", "value"), rows, "lr"),
            Text(
                f"Rates are per second of the measured window "
                f"({num((summary.get('window') or {}).get('seconds'))} s)."
            ),
        ),
    )


def resent_alert(counts: Mapping[str, Any]) -> Alert | None:
    """The requests sent twice (a reused connection that ended before any byte of the answer):
    the server saw each of them twice, so the report says how many."""
    retries = counts.get("retries") or {}
    n = retries.get("requests") or 0
    if not n:
        return None
    return Alert(
        "warning",
        f"{n} request(s) were sent twice:",
        "the kept-alive connection each first went out on closed before any byte of the answer "
        "(the server was closing it), so loadgen sent it once more on a fresh connection; each "
        "record says attempts 2, and its latencies are of the attempt that was answered.",
    )


def stream_end_alert(c: Mapping[str, Any]) -> Alert | None:
    """Streams accepted without their end marker, said once."""
    n = (c.get("stream_ends") or {}).get("no_terminator")
    if not n:
        return None
    return Alert(
        "warning",
        f"{n} ok stream(s) ended without data: [DONE]:",
        "each closed cleanly after its finish_reason (and the usage asked for), as Hugging Face's "
        "transformers serve ends its streams; loadgen takes them whole, as the OpenAI SDK does, and "
        "each record says stream_end no_terminator. target.require_done: true fails them instead.",
    )


def errors_section(summary: Summary) -> Section:
    c = summary.get("counts") or {}
    by_class = c.get("errors_by_class") or {}
    resent = resent_alert(c)
    unmarked = stream_end_alert(c)
    if not by_class:
        ok_text = Text(f"No errors: all {c.get('sent', 0)} measured requests succeeded.")
        extra = tuple(a for a in (resent, unmarked) if a is not None)
        return Section("Errors", (ok_text, *extra))
    sent = c.get("sent") or 0
    samples = c.get("error_samples") or {}
    rows: tuple[tuple[str, ...], ...] = tuple(
        (k, str(v), pct(v / sent if sent else None)) for k, v in by_class.items()
    )
    head: tuple[str, ...] = ("error class", "requests", "share of sent")
    if samples:  # a summary from before error samples has none: no empty column
        head += ("the server's message (first request)",)
        rows = tuple((*row, (samples[row[0]]["message"] or "") if row[0] in samples else "") for row in rows)
    blocks: list = [Table(head, rows, "lrrl"[: len(head)])]
    blocks += [
        Alert("warning", f"{k}: the fix.", hint)
        for k, sample in samples.items()
        if (hint := sample.get("hint"))
    ]
    blocks += [
        Text(
            f"Error rate {pct(c.get('error_rate'), 2)} (failed / (ok + failed)); failed requests "
            "count against goodput and are never dropped."
        ),
    ]
    if resent is not None:
        blocks.append(resent)
    if unmarked is not None:
        blocks.append(unmarked)
    backoff = c.get("retry_after") or {}
    if backoff.get("requests"):
        blocks.append(
            Alert(
                "warning",
                "The server asked the client to back off:",
                f"{backoff['requests']} response(s) carried Retry-After (up to "
                f"{backoff['max_s']:g} s); loadgen does not retry, so each is one failed request.",
            )
        )
    return Section("Errors", tuple(blocks))
