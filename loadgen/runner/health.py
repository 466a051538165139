"""Is the client itself the bottleneck? Its own figures, and a warning when they say so.

A saturated load generator inflates every latency it measures and none of the well-known peers
says so in its results; loadgen does: the summary's ``client`` block carries the event-loop lag,
timer lateness, CPU use and send lag, and a ``client_limited`` warning with the reasons.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from loadgen.analysis import metrics
from loadgen.analysis.table import RecordTable, as_table
from loadgen.summary import ClientHealth, ClientSelfcheck

# The client is saturated (and its latencies inflated) when its event loop runs this late, or
# its process burns this much of one core over the sending window (DriveResult.cpu_s: from the
# dispatch's start to its last request's end, so start-up, probing and the workload's building
# are not in it), when that window served a measured request.
LOOP_LAG_LIMIT_MS = 5.0
CPU_BUSY_LIMIT = 0.9
# The machine was busy when some runnable task waited for a CPU this much of the load's wall
# time (pressure.py): more work than cores, so a process that trails may be kept off the CPU
# rather than doing too much itself. Said as the cause beside a client_limited warning or a
# failed fidelity check, not a warning of its own: a busy machine with a punctual client
# measured well.
BUSY_STALL_FRACTION = 0.2


def busy_machine(stall_fraction: float | None) -> str | None:
    """The sentence naming the busy machine as the cause, or None when it was not busy."""
    if stall_fraction is None or stall_fraction < BUSY_STALL_FRACTION:
        return None
    return (
        f"the machine was busy: a runnable task waited for a CPU {stall_fraction * 100:.0f} % of the run "
        "(more work than cores; /proc/pressure/cpu): rerun on an idle machine, or with fewer "
        "processes sharing its cores"
    )


def assess(
    result: Any,
    cpu_s: float,
    records: Any,
    capped: bool,
    workers: list[dict[str, Any]] | None = None,
    selfcheck: ClientSelfcheck | None = None,
    cpu_stall_fraction: float | None = None,
) -> ClientHealth:
    """The client's own figures, and one ``client_limited`` warning when any says it was the
    bottleneck (then its latencies contain its own delay, and the summary says so).
    ``selfcheck``: the machine's saved ceiling beside the load asked for (real servers only),
    kept in the block, with an ``above_selfcheck`` warning when the load was above it.
    ``cpu_stall_fraction``: how much of the load some task waited for a CPU (``pressure.py``);
    when the machine was busy (``busy_machine``), the sentence is kept and named among the
    reasons of a ``client_limited`` warning.

    ``workers`` (``fleet.figures``): with more than one, every rule is applied to each worker
    on its own figures and records, and a reason names the worker it concerns: one saturated
    process among eight inflates an eighth of the requests, which a pooled p99 can hide."""
    wall_s = max(1e-9, (result.ended_ns - result.started_ns) / 1e9)
    loop_lag = metrics.distribution(np.asarray(result.loop_lag_ns, dtype=np.int64) / 1e6)
    wake = metrics.distribution(np.asarray(result.wake_late_ns, dtype=np.int64) / 1e6)
    cpu_frac = cpu_s / wall_s
    out: dict[str, Any] = {
        "cpu_seconds": cpu_s,
        "cpu_busy_fraction": cpu_frac,
        "event_loop_lag_ms": loop_lag,
        "dispatch_late_ms": wake,
        "warnings": [],
    }
    table = as_table(records)
    if workers is not None and len(workers) > 1:
        reasons = _per_worker(out, workers, table, capped)
        # The parent only routes records in a multi-worker run: its CPU is reported, not judged;
        # the run's CPU is every process's, and its busy fraction the busiest worker's.
        out["parent_cpu_seconds"], out["parent_cpu_busy_fraction"] = cpu_s, cpu_frac
        out["cpu_seconds"] = cpu_s + sum(w["cpu_seconds"] for w in workers)
        out["cpu_busy_fraction"] = max(w["cpu_busy_fraction"] for w in workers)
        # event_loop_lag_ms / dispatch_late_ms above pool every worker's probe samples (the merged
        # stage results carry them all); each worker's own are in its block.
    else:
        block, reasons = _one(loop_lag, wake, cpu_frac, table, capped)
        out["warnings"] += block["warnings"]
    out["machine_cpu_stall_fraction"] = cpu_stall_fraction
    busy = busy_machine(cpu_stall_fraction)
    if busy is not None:
        out["busy_machine"] = busy
        if reasons:
            reasons.append(busy)
    if reasons:
        out["warnings"].insert(
            0,
            {
                "warning": "client_limited",
                "reasons": reasons,
                "message": "the client, not the server, may have limited this run: its latencies "
                "include client delay; lower the load per process or use more workers (--workers)",
            },
        )
    out["client_limited"] = bool(reasons)
    if selfcheck is not None:
        out["selfcheck"] = selfcheck
        if selfcheck["above_ceiling"]:
            out["warnings"].append({"warning": "above_selfcheck", "message": selfcheck.get("message", "")})
    return cast(ClientHealth, out)


def _per_worker(
    out: dict[str, Any], workers: list[dict[str, Any]], table: RecordTable, capped: bool
) -> list[str]:
    """Each worker judged on its own figures and records: its block goes to ``out["workers"]``,
    its warnings (with its index) to ``out["warnings"]``; the reasons, each naming its worker."""
    scalars = table.without_chunks()  # a worker's share is judged on its sends: no chunk copies
    worker_of = scalars.column("worker")
    out["workers"] = []
    reasons: list[str] = []
    for w in workers:
        mine = scalars.select(worker_of == w["worker"])
        block, why = _one(
            metrics.distribution(np.asarray(w["loop_lag_ns"], dtype=np.int64) / 1e6),
            metrics.distribution(np.asarray(w["wake_late_ns"], dtype=np.int64) / 1e6),
            w["cpu_busy_fraction"],
            mine,
            capped,
        )
        name = f"worker {w['worker']} ({w['where']})"
        reasons += [f"{name}: {r}" for r in why]
        out["warnings"] += [dict(x, worker=w["worker"]) for x in block.pop("warnings")]
        keep = {k: v for k, v in w.items() if k not in ("loop_lag_ns", "wake_late_ns")}
        out["workers"].append({**keep, **block, "client_limited": bool(why)})
    return reasons


def _served(table: RecordTable) -> bool:
    """Whether any measured request was ok: without one, a busy CPU inflated no latency that is
    reported (a server that rejects every request at once keeps a closed loop's client busy
    sending the next one, which says nothing about the client's delay on a served request)."""
    return len(table) > 0 and bool(np.any(table.column("ok") & ~table.column("warmup")))


def _one(
    loop_lag: dict, wake: dict, cpu_frac: float, table: RecordTable, capped: bool
) -> tuple[dict, list[str]]:
    """One process's figures judged: (its block with any schedule-slip warning, the reasons it
    limited the run)."""
    block: dict[str, Any] = {"event_loop_lag_ms": loop_lag, "dispatch_late_ms": wake, "warnings": []}
    reasons = []
    if (loop_lag["p99"] or 0) > LOOP_LAG_LIMIT_MS:
        reasons.append(f"event-loop lag p99 {loop_lag['p99']:.1f} ms > {LOOP_LAG_LIMIT_MS} ms")
    if (wake["p99"] or 0) > LOOP_LAG_LIMIT_MS:
        reasons.append(f"timer wake-ups late by p99 {wake['p99']:.1f} ms > {LOOP_LAG_LIMIT_MS} ms")
    if cpu_frac > CPU_BUSY_LIMIT and _served(table):
        reasons.append(f"client process used {cpu_frac:.0%} of a core")
    lag = metrics.client_limits(table, lag_threshold_ms=LOOP_LAG_LIMIT_MS)
    if lag is not None:
        if capped:
            # Waiting for a slot under max_concurrency is the cap doing its job, not a slow client.
            block["warnings"].append(
                {
                    "warning": "schedule_slip",
                    "client_lag_p99_ms": lag["client_lag_p99_ms"],
                    "message": f"p99 send lag {lag['client_lag_p99_ms']:.1f} ms: requests waited for a "
                    f"slot under load.max_concurrency, so the offered rate was not kept",
                }
            )
        else:
            reasons.append(
                f"requests sent late by p99 {lag['client_lag_p99_ms']:.1f} ms "
                f"({lag['late_fraction']:.1%} later than {LOOP_LAG_LIMIT_MS} ms)"
            )
    return block, reasons
