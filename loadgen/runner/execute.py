"""Execute a prepared run: the load itself, with records reaching the disk as they finish.

Around the driver: the server's /metrics scraper on a connection of its own, the progress
ticker, the process's CPU time, and a frozen garbage collector (a full collection walks every
object of the process and stalled the loop ~50 ms mid-run). Every record is scrubbed of the
secrets the client sent before it is kept or written. A records file that stops taking lines
(disk full, folder removed) stops the run: what was saved is said, nothing is lost silently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.record_store import STORE, compact
from loadgen.backends.stream import Live
from loadgen.clock import now_ns
from loadgen.live.stats import LiveStats
from loadgen.memory import frozen_for_the_load
from loadgen.records import JsonlSink, RequestRecord, SinkError
from loadgen.result import REQUESTS
from loadgen.runner import pressure
from loadgen.runner.driver import DriveResult
from loadgen.runner.fleet import Fleet, InProcess, Workers, resolve_workers
from loadgen.runner.plan import FixedPlan, StageOutcome, StagePlan, shape_for
from loadgen.runner.prepare import Prepared
from loadgen.server import gpu_scraper
from loadgen.server.gpu_scraper import TelemetryScraper, TelemetrySeries
from loadgen.server.scraper import ServerMetricsScraper, ServerSeries, write_rows

_PROGRESS_EVERY_S = 0.25


@dataclass(slots=True)
class Progress:
    """What a progress display needs, handed to ``on_progress`` a few times a second."""

    total: int | None
    duration_s: float | None
    elapsed_s: float
    live: Live


@dataclass(slots=True)
class Executed:
    result: DriveResult
    # The client's CPU seconds: in-process, over the stages' sending windows (DriveResult.cpu_s);
    # with worker processes, the parent's over the whole load (reported, not judged).
    cpu_s: float
    started_at: dt.datetime
    ended_at: dt.datetime
    server_series: ServerSeries | None
    sink_error: SinkError | None
    records_saved: int
    stages: list[StageOutcome]
    # Stages the run was made of: the profile's (all of them, even when it was stopped before
    # the last), or as many as a plan (the capacity search) decided to run.
    planned_stages: int
    plan: StagePlan  # what decided the stages: it may add a block of its own to the summary
    workers: list[dict[str, Any]]  # per worker: where, CPU, loop lag, clock (fleet.figures)
    lost: list[str]  # one sentence per worker lost during the run
    telemetry: TelemetrySeries | None = None  # the GPUs' readings (telemetry.jsonl)
    # The machine: the fraction of the load's wall time some runnable task waited for a CPU
    # (pressure.py); None where the kernel does not say.
    cpu_stall_fraction: float | None = None


async def execute(
    p: Prepared,
    stop: asyncio.Event | None,
    on_progress: Callable[[Progress], None] | None,
    status: Callable[[str], None],
    plan: StagePlan | None = None,
    watch: LiveStats | None = None,
) -> Executed:
    """Run the load of ``p``, stage after stage as ``plan`` (default: the profile's stages)
    says; closes its transport."""
    profile = p.profile
    stop = stop or asyncio.Event()
    ran: StagePlan = plan or FixedPlan(p.stages)
    scraper = gpus = None
    try:
        scraper = await ServerMetricsScraper.open(
            profile.server_metrics, profile.target.transport, p.target.opts
        )
        gpus = await TelemetryScraper.open(profile.telemetry, p.target.sim_http_url, profile.target.transport)
        started_at = dt.datetime.now(dt.timezone.utc)
        cpu0, stall0, wall0 = time.process_time(), pressure.cpu_stall_us(), time.monotonic()
        with JsonlSink(p.run_dir / REQUESTS, on_error=lambda _e: stop.set()) as sink:
            if watch is not None:
                watch.server_row, watch.counters = scraper.latest, p.live
            fleet, outcomes = await _drive(p, ran, sink, stop, on_progress, status, watch, gpus.mark)
        if sink.error is not None:
            status(f"stopped: {sink.error}; {sink.count} records were saved before it")
        cpu_s = time.process_time() - cpu0
        stall1, wall_s = pressure.cpu_stall_us(), max(time.monotonic() - wall0, 1e-9)
        stalled = None if stall0 is None or stall1 is None else min((stall1 - stall0) / 1e6 / wall_s, 1.0)
        ended_at = dt.datetime.now(dt.timezone.utc)
        result = _joined(outcomes)
        if isinstance(fleet, InProcess):  # the load's own CPU: its stages' sending windows
            cpu_s = result.cpu_s
        # The GPUs first: their last reading right after the load bounds its energy closely
        # (the server's last scrape may wait up to a second for its histograms to settle).
        telemetry = await gpus.stop()
        gpu_scraper.write_rows(p.run_dir, telemetry)
        series = await scraper.stop(expected_requests=result.ok)
        write_rows(p.run_dir, series)
    finally:
        if scraper is not None:
            await scraper.aclose()
        if gpus is not None:
            await gpus.aclose()
        await p.aclose()
    figures = fleet.figures((result.ended_ns - result.started_ns) / 1e9)
    planned = len(outcomes) if plan is not None else len(p.stages)
    if profile.output.records == "columnar" and sink.error is None:
        outcomes = _compacted(p, outcomes, status)
    return Executed(
        result,
        cpu_s,
        started_at,
        ended_at,
        series,
        sink.error,
        sink.count,
        outcomes,
        planned,
        ran,
        figures,
        fleet.lost(),
        telemetry,
        cpu_stall_fraction=stalled,
    )


async def _drive(
    p: Prepared,
    plan: StagePlan,
    sink: JsonlSink,
    stop: asyncio.Event,
    on_progress: Callable[[Progress], None] | None,
    status: Callable[[str], None],
    watch: LiveStats | None,
    on_start: Callable[[], Awaitable[None]],
) -> tuple[Fleet, list[StageOutcome]]:
    """The stages through one fleet into ``sink`` (each record scrubbed on its way), with the
    progress ticker; the garbage collector's long-lived objects frozen for the load;
    ``on_start`` awaited just before the first stage (the GPUs' reading that opens the load)."""
    scrub = p.target.scrubber.scrub_record

    def keep(rec: RequestRecord) -> None:
        scrub(rec)
        sink.write(rec)
        if watch is not None:
            watch.add(rec)

    fleet = await _fleet(p, sink, keep, status, None if watch is None else watch.add_lines)
    duration_s = p.profile.workload.duration_s
    t0 = now_ns()
    ticker = _start_ticker(on_progress, p.total, duration_s, p.live)
    try:
        with frozen_for_the_load():
            await on_start()
            outcomes = await _run_stages(p, plan, fleet, sink, stop, status, watch)
    finally:
        if ticker is not None and on_progress is not None:
            ticker.cancel()
            on_progress(Progress(p.total, duration_s, (now_ns() - t0) / 1e9, p.live))
        await fleet.aclose()
    return fleet, outcomes


async def _fleet(
    p: Prepared,
    sink: JsonlSink,
    keep: Callable[[RequestRecord], None],
    status: Callable[[str], None],
    on_lines: Callable[[bytes], None] | None,
) -> Fleet:
    """This process alone, or worker processes / Ray actors as the profile's client section says."""
    client = p.profile.client
    if client.ray is not None:
        from loadgen.runner.cluster import ray_channels

        channels = await ray_channels(client.ray, client.workers, status)
        actors = await Workers.start(p, len(channels), sink, keep, channels, on_lines)
        status(f"{actors.size} Ray workers: " + ", ".join(w.channel.label for w in actors.pool.workers))
        return actors
    n = resolve_workers(client.workers)
    if n == 1:
        return InProcess(p, keep)
    workers = await Workers.start(p, n, sink, keep, on_lines=on_lines)
    status(f"{n} worker processes: " + ", ".join(w.channel.label for w in workers.pool.workers))
    return workers


async def _run_stages(
    p: Prepared,
    plan: StagePlan,
    fleet: Fleet,
    sink: JsonlSink,
    stop: asyncio.Event,
    status: Callable[[str], None],
    watch: LiveStats | None = None,
) -> list[StageOutcome]:
    """Each stage in turn through the one fleet and sink; a stage starts once the last one's
    requests have all finished (so its records are one contiguous span of requests.jsonl), and
    its request ids follow the last one's."""
    outcomes: list[StageOutcome] = []
    first_id, previous = 0, None
    seed = p.profile.workload.seed
    while not stop.is_set() and (stage := plan.next_stage(outcomes)) is not None:
        if len(p.stages) > 1 or stage.index > 0:
            status(f"stage {stage.index}: {stage.name}")
        shape, limits = shape_for(stage, previous, first_id, seed, p.workload)
        if watch is not None:
            watch.context.update(
                stage=stage.index, stage_name=stage.name, stages=len(p.stages), load=stage.load()
            )
        start, first_row = sink.offset, sink.count
        result = await fleet.run(stage.index, shape, limits, stop)
        outcomes.append(StageOutcome(stage, result, sink.path, (start, sink.offset), (first_row, sink.count)))
        first_id = max(first_id, result.max_id + 1)
        previous = stage
        if result.interrupted:
            break
    return outcomes


def _compacted(
    p: Prepared, outcomes: list[StageOutcome], status: Callable[[str], None]
) -> list[StageOutcome]:
    """The run's requests.jsonl compacted into its record store once the load is over (not a
    cycle of the load's own), the log removed; the stages then read their rows from the store.
    A store that cannot be written leaves the log, which every reader reads as well."""
    log, store = p.run_dir / REQUESTS, p.run_dir / STORE
    try:
        compact(log, store)
    except OSError as exc:
        status(f"records stay in {log}: cannot write {store}: {exc.strerror or exc}")
        return outcomes
    log.unlink()
    return [dataclasses.replace(o, path=store) for o in outcomes]


def _joined(outcomes: list[StageOutcome]) -> DriveResult:
    """The stages' results as one run's: every record, from the first start to the last end."""
    if not outcomes:
        t = now_ns()
        return DriveResult([], t, t, False)
    first, last = outcomes[0].result, outcomes[-1].result
    joined = DriveResult([], first.started_ns, last.ended_ns, any(o.result.interrupted for o in outcomes))
    for o in outcomes:
        joined.wake_late_ns.extend(o.result.wake_late_ns)
        joined.loop_lag_ns.extend(o.result.loop_lag_ns)
        joined.cpu_s += o.result.cpu_s
        joined.sent += o.result.sent
        joined.ok += o.result.ok
        joined.max_id = max(joined.max_id, o.result.max_id)
    return joined


def _start_ticker(
    on_progress: Callable[[Progress], None] | None, total: int | None, duration_s: float | None, live: Live
) -> asyncio.Task[Any] | None:
    if on_progress is None:
        return None
    t0 = now_ns()

    async def tick() -> None:
        while True:
            on_progress(Progress(total, duration_s, (now_ns() - t0) / 1e9, live))
            await asyncio.sleep(_PROGRESS_EVERY_S)

    return asyncio.create_task(tick())
