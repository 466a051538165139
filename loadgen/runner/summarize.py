"""Summarize a run: its records and conditions into summary.json.

What the numbers were measured under comes first (target, server, profile, lengths requested
and realised, client, host, labels), then the metrics, the client's health and the server's
own view. Two rules hold for everything written here: a run stopped before its limits is
marked incomplete (its SLA verdict is ``incomplete``, never ``pass``), and every string passes
the run's scrubber, so no credential the client sent reaches the file.
"""

from __future__ import annotations

import asyncio
from typing import cast

import numpy as np

from loadgen.analysis import metrics, sla
from loadgen.analysis.record_store import read_run_table
from loadgen.analysis.table import RecordTable
from loadgen.backends import registry
from loadgen.memory import give_back_freed_memory
from loadgen.redact import redact_profile, redact_url
from loadgen.result import SCHEMA_VERSION, write_summary
from loadgen.runner import blocks, conditions, health
from loadgen.runner.execute import Executed
from loadgen.runner.prepare import Prepared
from loadgen.server import telemetry as gpu_telemetry
from loadgen.summary import (
    ClientHealth,
    Conditions,
    Counts,
    EndedBy,
    LengthStats,
    Summary,
)
from loadgen.summary.conditions import ConditionsLengthsRealised, ConditionsPromptLengths, ConditionsServer
from loadgen.summary.stages import PrecisionBlock
from loadgen.workload import Workload
from loadgen.workload.lengths import describe


def summarize(p: Prepared, ex: Executed) -> Summary:
    """The summary of a run that was prepared and executed, written to the run folder. It is
    computed from requests.jsonl, read back columnar: the run kept no record in memory, and
    a run split among workers is summarised from their merged records like any other. Three
    steps: the measured core, the optional blocks (``runner/blocks.py``, each from the module
    that owns its math), then the SLA verdict, last and once, over the finished blocks."""
    profile = p.profile
    give_back_freed_memory()
    table = read_run_table(p.run_dir)
    reason = incomplete_reason(ex)
    streamed = registry.backend(profile.target.endpoint).streamed  # which metrics apply
    counts, window, measured = metrics.measure(table, sla=profile.sla, streamed=streamed)
    run = blocks.MeasuredRun(table, window, counts, measured, profile, ex, p.target.sim_info, p.run_dir)
    optional = blocks.build(run)
    summary = cast(
        Summary,
        {
            "schema_version": SCHEMA_VERSION,
            "run_id": p.run_dir.name,
            "started_at": ex.started_at.isoformat(),
            "ended_at": ex.ended_at.isoformat(),
            "interrupted": ex.result.interrupted,
            "complete": reason is None,
            "incomplete_reason": reason,
            "conditions": _conditions(p, ex, table),
            "counts": counts,
            "window": window,
            "metrics": measured,
            "ended_by": ended_by(
                p, ex, counts, reason, cast("PrecisionBlock | None", optional.get("precision"))
            ),
            "client": _client(p, ex, table),
            **optional,
        },
    )
    # Last and once: a rule may bound any block (the GPUs' energy is telemetry's).
    summary["sla"] = sla.evaluate(profile.sla, summary, incomplete=reason is not None)
    summary = p.target.scrubber.scrub_data(summary)
    write_summary(p.run_dir, summary)
    return summary


def _client(p: Prepared, ex: Executed, table: RecordTable) -> ClientHealth:
    """The client's own health, with the machine's saved self-check beside the load asked for."""
    capped = bool(p.profile.load.max_concurrency)
    return health.assess(
        ex.result,
        ex.cpu_s,
        table,
        capped=capped,
        workers=ex.workers,
        selfcheck=p.selfcheck,
        cpu_stall_fraction=ex.cpu_stall_fraction,
    )


def ended_by(
    p: Prepared, ex: Executed, counts: Counts, reason: str | None, precision: PrecisionBlock | None = None
) -> EndedBy:
    """Which limit ended the run, said in words: a user who gave ``--duration 60`` to a profile
    with ``num_requests: 200`` must see that the count, not the time, ended it."""
    work = p.profile.workload
    seconds = (ex.result.ended_ns - ex.result.started_ns) / 1e9
    if reason is not None:
        return {"limit": "stopped", "text": f"stopped early: {reason}"}
    if ex.planned_stages > 1:
        return {"limit": "stages", "text": f"all {ex.planned_stages} stages ran, each to its own limit"}
    if precision is not None and precision["reached"]:
        got = precision["half_width_at_stop"] or 0.0
        return {
            "limit": "until",
            "text": f"load.until: {precision['until']} reached (±{got * 100:.1f}% over "
            f"{precision['samples_at_stop']} requests; {precision['estimate']:.1f} ms, 95% interval "
            f"{precision['low']:.1f}-{precision['high']:.1f} over all {precision['samples']}), with "
            f"{counts['sent']} requests sent, in {seconds:.1f} s",
        }
    if work.trace is not None:
        return {"limit": "trace", "text": f"the trace's end ({counts['sent']} requests sent)"}
    n, d = work.num_requests, work.duration_s
    if n is not None and (d is None or counts["sent"] >= n):
        text = f"workload.num_requests: {n} requests sent, in {seconds:.1f} s"
        if d is not None:
            text += f", before workload.duration_s ({d:g} s)"
        return {"limit": "num_requests", "text": text}
    if d is not None:
        text = f"workload.duration_s: {d:g} s elapsed, {counts['sent']} requests sent"
        if n is not None:
            text += f" of workload.num_requests {n}"
        return {"limit": "duration_s", "text": text}
    return {"limit": "none", "text": f"{counts['sent']} requests sent"}


def incomplete_reason(ex: Executed) -> str | None:
    """Why the run did not send all its limits asked for, or None when it did.

    The rule: a run is complete when it stopped on its own (the request count was sent, or the
    duration elapsed, and what was in flight finished). A stop from outside (Ctrl-C, SIGTERM,
    ``stop``) before that, or a records file that could not take another line, leaves it
    incomplete, whatever the numbers say: its percentiles describe a shorter run than asked.
    """
    if ex.sink_error is not None:
        return f"records could not be written: {ex.sink_error}"
    if ex.lost:
        return (
            "; ".join(ex.lost) + ": its in-flight requests are recorded as worker_lost and the "
            "rest of its share was not sent"
        )
    if ex.result.interrupted:
        return "stopped before its limits (Ctrl-C or SIGTERM); in-flight requests were cancelled"
    return None


def _conditions(p: Prepared, ex: Executed, table: RecordTable) -> Conditions:
    """What the numbers were measured under: the target and what it said of itself, the
    resolved profile, the lengths asked for and realised, the client and the host."""
    profile, t = p.profile, p.profile.target
    workers = len(ex.workers)
    resolved = profile.resolved()
    # The load as it ran, in both places it is recorded: not a default of a knob that did not run.
    resolved["load"] = profile.load.recorded(trace=profile.workload.trace is not None)
    fit = dict(p.prompt_fit)
    exact = fit["method"].startswith("server /tokenize") and fit["exact"] == fit["requests_fitted"]
    extra = _server_extra_tokens(table)
    if extra is not None:
        fit["server_extra_tokens"] = extra
    server = dict(p.server)
    if ex.server_series is not None and ex.server_series.available:
        server["metrics_labels"] = ex.server_series.labels
    tls = None
    if p.target.url.startswith("https://"):
        tls = {"verify": t.verify_tls, "ca_bundle": t.ca_bundle}
    cond: Conditions = {
        "target": {
            "url": redact_url(p.target.url),
            "endpoint": t.endpoint,
            "model": p.model,
            # A protocol with its own transport (gRPC) goes over it, not target.transport.
            "transport": t.transport if p.backend.wire == "http" else p.backend.wire,
            "builtin_simulator": p.target.sim_info,
            "tls": tls,
        },
        "server": cast(ConditionsServer, server),
        "profile": redact_profile(resolved),
        "seed": profile.workload.seed,
        "load": resolved["load"],
        "lengths": {
            "requested": {
                "input_tokens": resolved["workload"]["input_tokens"],
                "output_tokens": resolved["workload"]["output_tokens"],
            },
            "realised": _realised(p.workload, table),
        },
        "prompt_lengths_approximate": p.workload.approximate_prompt_lengths and not exact,
        "prompt_lengths": cast(ConditionsPromptLengths, fit),
        "traffic": p.workload.traffic(),
        "client": conditions.client_info(
            t.transport,
            type(asyncio.get_running_loop()).__module__,
            workers,
            "ray" if profile.client.ray else "processes" if workers > 1 else "in-process",
        ),
        "host": conditions.host_info(),
        "labels": dict(profile.labels),
    }
    if ex.telemetry is not None:
        cond["telemetry"] = gpu_telemetry.conditions(ex.telemetry)
    return cond


def _server_extra_tokens(table: RecordTable) -> LengthStats | None:
    """The server's prompt over the one loadgen made, request by request (usage.prompt_tokens
    minus the prompt's own count), over the measured ok requests the server gave usage for: what
    its chat template and special tokens add; None without any such request."""
    if not len(table):
        return None
    rows = table.column("ok") & ~table.column("warmup") & (table.column("prompt_tokens_source") == "usage")
    prompt, has_prompt = table.ints("prompt_tokens")
    rows &= has_prompt
    if not rows.any():
        return None
    return describe(prompt[rows] - table.column("requested_prompt_tokens")[rows].astype(np.int64))


def _realised(workload: Workload, table: RecordTable) -> ConditionsLengthsRealised:
    """Lengths as sampled by the workload (of the measured requests), and as the server
    reported them (of the measured ok ones)."""
    measured = ~table.column("warmup")
    ok = table.column("ok") & measured
    out, has_out = table.ints("output_tokens")
    prompt, has_prompt = table.ints("prompt_tokens")
    counted = ok & has_out
    short = out[counted] < table.column("requested_output_tokens")[counted]
    if workload.sessions is not None:  # a turn's prompt is its history: as each one asked
        sampled = {
            "input_tokens": describe(table.column("requested_prompt_tokens")[measured].astype(np.int64)),
            "output_tokens": describe(table.column("requested_output_tokens")[measured].astype(np.int64)),
        }
    else:
        sampled = workload.realised(int(i) for i in table.column("id")[measured])
    return {
        "sampled": sampled,
        "server_prompt_tokens": describe(prompt[ok & has_prompt].astype(np.int64)),
        "server_output_tokens": describe(out[counted].astype(np.int64)),
        "output_tokens_short_of_requested": int(short.sum()),
    }
