"""Is the client itself the bottleneck? Its own figures, and a warning when they say so.

A saturated load generator inflates every latency it measures and none of the well-known peers
says so in its results; loadgen does: the summary's ``client`` block carries the event-loop lag,
timer lateness, CPU use and send lag, and a ``client_limited`` warning with the reasons.
"""

from __future__ import annotations

from typing import Any

from loadgen.analysis import metrics

# The client is saturated (and its latencies inflated) when its event loop runs this late, or
# its process burns this much of one core.
LOOP_LAG_LIMIT_MS = 5.0
CPU_BUSY_LIMIT = 0.9


def assess(result: Any, cpu_s: float, records: list, capped: bool) -> dict:
    """The client's own figures, and one ``client_limited`` warning when any says it was the
    bottleneck (then its latencies contain its own delay, and the summary says so)."""
    wall_s = max(1e-9, (result.ended_ns - result.started_ns) / 1e9)
    loop_lag = metrics.distribution([x / 1e6 for x in result.loop_lag_ns])
    wake = metrics.distribution([x / 1e6 for x in result.wake_late_ns])
    cpu_frac = cpu_s / wall_s
    out: dict[str, Any] = {
        "cpu_seconds": cpu_s,
        "cpu_busy_fraction": cpu_frac,
        "event_loop_lag_ms": loop_lag,
        "dispatch_late_ms": wake,
        "warnings": [],
    }
    reasons = []
    if (loop_lag["p99"] or 0) > LOOP_LAG_LIMIT_MS:
        reasons.append(f"event-loop lag p99 {loop_lag['p99']:.1f} ms > {LOOP_LAG_LIMIT_MS} ms")
    if (wake["p99"] or 0) > LOOP_LAG_LIMIT_MS:
        reasons.append(f"timer wake-ups late by p99 {wake['p99']:.1f} ms > {LOOP_LAG_LIMIT_MS} ms")
    if cpu_frac > CPU_BUSY_LIMIT:
        reasons.append(f"client process used {cpu_frac:.0%} of a core")
    lag = metrics.client_limits(records, lag_threshold_ms=LOOP_LAG_LIMIT_MS)
    if lag is not None:
        if capped:
            # Waiting for a slot under max_concurrency is the cap doing its job, not a slow client.
            out["warnings"].append(
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
    if reasons:
        out["warnings"].insert(
            0,
            {
                "warning": "client_limited",
                "reasons": reasons,
                "message": "the client, not the server, may have limited this run: its latencies "
                "include client delay; lower the load per process or use more workers",
            },
        )
    out["client_limited"] = bool(reasons)
    return out
