"""Execute a prepared run: the load itself, with records reaching the disk as they finish.

Around the driver: the server's /metrics scraper on a connection of its own, the progress
ticker, the process's CPU time, and a frozen garbage collector (a full collection walks every
object of the process and stalled the loop ~50 ms mid-run). Every record is scrubbed of the
secrets the client sent before it is kept or written. A records file that stops taking lines
(disk full, folder removed) stops the run: what was saved is said, nothing is lost silently.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadgen.backends.stream import Live
from loadgen.clock import now_ns
from loadgen.records import JsonlSink, RequestRecord, SinkError
from loadgen.result import REQUESTS
from loadgen.runner.driver import DriveResult, drive
from loadgen.runner.prepare import Prepared
from loadgen.server.scraper import ServerMetricsScraper, ServerSeries

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
    cpu_s: float
    started_at: dt.datetime
    ended_at: dt.datetime
    server_series: ServerSeries | None
    sink_error: SinkError | None
    records_saved: int


async def execute(
    p: Prepared,
    stop: asyncio.Event | None,
    on_progress: Callable[[Progress], None] | None,
    status: Callable[[str], None],
) -> Executed:
    """Run the load of ``p``; closes its transport."""
    profile = p.profile
    stop = stop or asyncio.Event()
    scraper = None
    try:
        scraper = await ServerMetricsScraper.open(
            profile.server_metrics, profile.target.transport, p.target.opts
        )
        started_at = dt.datetime.now(dt.timezone.utc)
        cpu0 = time.process_time()
        with JsonlSink(p.run_dir / REQUESTS, on_error=lambda _e: stop.set()) as sink:
            scrub = p.target.scrubber.scrub_record

            def keep(rec: RequestRecord) -> None:
                scrub(rec)
                sink.write(rec)

            t0 = now_ns()
            ticker = _start_ticker(on_progress, p.total, profile.workload.duration_s, p.live)
            gc.collect()
            gc.freeze()
            try:
                result = await drive(p.specs, p.backend, p.shape, p.limits, on_record=keep, stop=stop)
            finally:
                gc.unfreeze()
                if ticker is not None and on_progress is not None:
                    ticker.cancel()
                    on_progress(Progress(p.total, profile.workload.duration_s, (now_ns() - t0) / 1e9, p.live))
        if sink.error is not None:
            status(f"stopped: {sink.error}; {sink.count} records were saved before it")
        cpu_s = time.process_time() - cpu0
        ended_at = dt.datetime.now(dt.timezone.utc)
        series = await scraper.stop(expected_requests=sum(1 for r in result.records if r.ok))
    finally:
        if scraper is not None:
            await scraper.aclose()
        await p.transport.aclose()
    return Executed(result, cpu_s, started_at, ended_at, series, sink.error, sink.count)


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
