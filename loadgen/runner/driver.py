"""The driver: sends requests on schedule and turns each into exactly one record.

Open loop: absolute send deadlines are computed up front (``workload.build_schedule``) and the
driver sleeps until each one; when it is late it sends at once and the record keeps both the
scheduled and the actual send time, so lateness shows as client lag instead of vanishing
(coordinated omission). An optional cap on in-flight requests makes the wait for a slot part of
that lag too. Closed loop: N slots, each sends its next request as soon as its last one ended.

Every request that was handed to the backend yields one record (ok, failed with a class, or
cancelled when the run stops), written to the sink as soon as it finishes.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from loadgen.clock import now_ns, sleep_until
from loadgen.records import CANCELLED, RequestRecord

_LOOP_PROBE_S = 0.02


class Backend(Protocol):
    live: Any

    async def send(self, spec: Any, rec: RequestRecord) -> None: ...


class SpecSource(Protocol):
    def request(self, i: int) -> Any: ...


@dataclass(frozen=True, slots=True)
class DriveOptions:
    concurrency: int | None = None  # closed loop slots
    schedule_ns: Sequence[int] | None = None  # open loop offsets from the start
    max_concurrency: int | None = None  # open loop in-flight cap
    num_requests: int | None = None  # measured requests (warm-up comes on top)
    duration_s: float | None = None  # stop dispatching after this long
    warmup_requests: int = 0


@dataclass(slots=True)
class DriveResult:
    records: list[RequestRecord]
    started_ns: int
    ended_ns: int
    interrupted: bool
    wake_late_ns: list[int] = field(default_factory=list)  # open loop: timer lateness per send
    loop_lag_ns: list[int] = field(default_factory=list)  # event-loop probe overshoot samples


async def drive(specs: SpecSource, backend: Backend, opts: DriveOptions,
                on_record: Callable[[RequestRecord], None] | None = None,
                stop: asyncio.Event | None = None) -> DriveResult:
    """Run the load until the count, the duration or ``stop``; return every record."""
    records: list[RequestRecord] = []
    stop = stop or asyncio.Event()
    live = backend.live
    in_flight: set[asyncio.Task] = set()
    res = DriveResult(records, now_ns(), 0, False)
    total = None if opts.num_requests is None else opts.num_requests + opts.warmup_requests
    end_ns = None if opts.duration_s is None else res.started_ns + int(opts.duration_s * 1e9)

    def emit(rec: RequestRecord) -> None:
        records.append(rec)
        live.done += 1
        if not rec.ok and rec.error_class != CANCELLED:
            live.errors += 1
        if on_record is not None:
            on_record(rec)

    async def one(i: int, t_sched: int, spec: Any = None) -> None:
        if spec is None:
            spec = specs.request(i)
        rec = RequestRecord(id=i, warmup=i < opts.warmup_requests, t_sched_ns=t_sched,
                            t_send_ns=0, requested_output_tokens=spec.output_tokens,
                            requested_prompt_tokens=spec.prompt_tokens)
        live.in_flight += 1
        try:
            await backend.send(spec, rec)
        except asyncio.CancelledError:
            if rec.error_class is None:
                rec.ok, rec.error_class = False, CANCELLED
                rec.error_message = "the run stopped while this request was in flight"
                rec.t_end_ns = rec.t_end_ns or now_ns()
            raise
        finally:
            if rec.t_send_ns == 0:
                rec.t_send_ns = rec.t_sched_ns
            live.in_flight -= 1
            emit(rec)

    def ids() -> Any:
        return range(total) if total is not None else itertools.count()

    async def closed_slot(counter: Any) -> None:
        for i in counter:
            if end_ns is not None and now_ns() >= end_ns:
                return
            await one(i, now_ns())

    async def closed_loop() -> None:
        counter = iter(ids())  # shared: each slot takes the next id
        await asyncio.gather(*(closed_slot(counter) for _ in range(opts.concurrency)))

    async def open_loop() -> None:
        sem = asyncio.Semaphore(opts.max_concurrency) if opts.max_concurrency else None
        t0 = res.started_ns
        for i, off in zip(ids(), opts.schedule_ns):
            deadline = t0 + int(off)
            if end_ns is not None and deadline >= end_ns:
                break
            spec = specs.request(i)  # built before the deadline, so it costs no lag
            late = await sleep_until(deadline)
            if late is not None:
                res.wake_late_ns.append(late)
            if sem is not None:
                await sem.acquire()
            task = asyncio.create_task(one(i, deadline, spec))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            if sem is not None:
                task.add_done_callback(lambda _t: sem.release())
            await asyncio.sleep(0)  # let it send now, before the next spec is built
        while in_flight:
            await asyncio.gather(*list(in_flight), return_exceptions=True)

    async def probe() -> None:
        while True:
            t = now_ns()
            await asyncio.sleep(_LOOP_PROBE_S)
            res.loop_lag_ns.append(max(0, now_ns() - t - int(_LOOP_PROBE_S * 1e9)))

    if opts.concurrency is not None:
        main = asyncio.create_task(closed_loop())
    elif opts.schedule_ns is not None:
        main = asyncio.create_task(open_loop())
    else:
        raise ValueError("drive() needs either concurrency or schedule_ns")
    prober = asyncio.create_task(probe())
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not main.done():
            res.interrupted = True
            main.cancel()
            for t in list(in_flight):
                t.cancel()
            await asyncio.gather(main, *in_flight, return_exceptions=True)
        stopper.cancel()
        prober.cancel()
        await asyncio.gather(stopper, prober, return_exceptions=True)
    if main.done() and not main.cancelled() and main.exception() is not None:
        raise main.exception()
    res.ended_ns = now_ns()
    return res
