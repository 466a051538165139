"""The client's view of itself: CPU, loop lag, timer lateness, workers, the saved self-check."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from loadgen.summary.common import DOCS, Distribution


@with_config(DOCS)
class ClientWarnings(TypedDict, total=True):
    """a client-health warning"""

    warning: str
    """kind: client_limited or schedule_slip"""
    message: str
    """what it means for this run's numbers"""
    reasons: NotRequired[list[str]]
    """client_limited: each sign of it (sends late, the event loop lagging, the CPU saturated)"""


@with_config(DOCS)
class ClientWorkers(TypedDict, total=True):
    """ClientWorkers"""

    worker: int
    """the worker's index (records carry it in their worker field)"""
    where: str
    """where it ran: 'pid N', or the Ray node and actor"""
    pid: NotRequired[int | None]
    """its process id"""
    host: NotRequired[str | None]
    """its host name"""
    cpu_seconds: float
    """its CPU time"""
    cpu_busy_fraction: float
    """its CPU seconds per wall second of the run"""
    event_loop_lag_ms: Distribution
    """its event loop's probe lateness"""
    dispatch_late_ms: Distribution
    """its open-loop timers' lateness"""
    clock: dict[str, Any] | None
    """its clock anchor: same_clock (one CLOCK_MONOTONIC with the parent), offset_ns measured by ping,
    error_bound_ns (half the best round trip), shift_applied_ns (added to its timestamps)"""
    lost: str | None
    """why it was lost during the run (its in-flight requests are worker_lost records), or null"""
    client_limited: bool
    """whether this worker's own figures say it limited the run"""
    warnings: NotRequired[list[Any]]
    """not used per worker (warnings are in the client block, with a worker field)"""


@with_config(DOCS)
class ClientSelfcheck(TypedDict, total=True):
    """Only for a run against a real server on a machine with a saved `loadgen selfcheck` for its transport,
    loop kind and worker count: the highest load that machine drove with its own timestamp error under the
    threshold, beside the load this run asked for."""

    ceiling: float | None
    """highest load that passed the self-check (concurrent streams or req/s); null: not even the lowest"""
    unit: str
    """'concurrent streams' (closed loop) or 'req/s' (open loop)"""
    requested: float
    """this run's highest load level, in the same unit"""
    workers: Annotated[int, Field(ge=1)]
    """worker processes of this run (the check's row that was used)"""
    above_ceiling: bool
    """the load asked for exceeds the ceiling: an above_selfcheck warning is in warnings"""
    message: NotRequired[str]
    """the warning's text, when above_ceiling"""
    tokens_per_s: NotRequired[float | None]
    """output tokens/s the self-check streamed at its ceiling"""
    first_token_lag_p99_ms: NotRequired[float | None]
    """first-token lag p99 at the ceiling (ms)"""
    threshold_ms: NotRequired[float | None]
    """the self-check's first-token lag p99 bound (ms)"""
    pace: NotRequired[str | None]
    """'real time' (the simulated GPU's pace) or 'unpaced'"""
    saved_at: NotRequired[str | None]
    """when the self-check was saved (UTC, ISO 8601)"""
    path: NotRequired[str]
    """the file it was read from"""


@with_config(DOCS)
class ClientHealth(TypedDict, total=True):
    """the load generator's own health during the run"""

    cpu_seconds: float
    """CPU time the client used (every worker process and the parent)"""
    cpu_busy_fraction: float
    """CPU seconds per wall second of the busiest client process (1.0 = one full core)"""
    event_loop_lag_ms: Distribution
    """how late the event loop's periodic probe ran"""
    dispatch_late_ms: Distribution
    """how late open-loop timers woke past their deadlines"""
    warnings: list[ClientWarnings]
    """client_limited / schedule_slip warnings"""
    client_limited: bool
    """true when the client, not the server, may have limited the run"""
    machine_cpu_stall_fraction: NotRequired[float | None]
    """the fraction of the load's wall time some runnable task on the machine waited for a CPU (Linux
    pressure stall information, /proc/pressure/cpu `some`); null where the kernel does not say"""
    busy_machine: NotRequired[str]
    """when that fraction reached 0.2: the machine was busy, in words; named as the cause beside a
    client_limited warning and a failed fidelity check"""
    parent_cpu_seconds: NotRequired[float]
    """multi-worker runs: CPU time of the parent process (it routes records, sends no load)"""
    parent_cpu_busy_fraction: NotRequired[float]
    """multi-worker runs: the parent's CPU seconds per wall second"""
    workers: NotRequired[list[ClientWorkers]]
    """multi-worker runs: each worker process or Ray actor, judged on its own figures"""
    selfcheck: NotRequired[ClientSelfcheck]
