"""The driver: runs a load shape and turns every request it sends into exactly one record.

Every request handed to the backend yields one record (ok, failed with a class, or cancelled
when the run stops), written to the sink as soon as it finishes. The shape (``shapes.py``)
decides only when requests go out; counting, stopping, cancelling and the client's own
event-loop probe live here, once, whatever the shape.
"""

from __future__ import annotations

import array
import asyncio
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from loadgen.backends.stream import Live
from loadgen.clock import cancel_all, now_ns, sleep_until
from loadgen.records import CANCELLED, RequestRecord, RequestSpec, set_media
from loadgen.runner.answers import NO_ANSWERS, AnswerPolicy, prompt_hash, settle_answer
from loadgen.runner.shapes import Answer, LoadShape

_LOOP_PROBE_S = 0.02


class Backend(Protocol):
    live: Live

    async def send(self, spec: RequestSpec, rec: RequestRecord) -> None: ...


class SpecSource(Protocol):
    def request(self, i: int) -> RequestSpec: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """When a run stops dispatching: after ``num_requests`` measured requests (warm-up comes on
    top), after ``duration_s``, or when ``stop`` is set; the first of them wins."""

    num_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    first_id: int = 0  # a later stage's requests are numbered after the earlier stages'
    ramp_s: float = 0.0  # requests scheduled before this much of the stage are warm-up
    # A worker's share of the stage: the ids it sends (the warm-up rule above still counts from
    # first_id, so warm-up means the same requests however the stage is split). None: all of
    # first_id .. first_id + num_requests + warmup_requests (or unbounded for a duration).
    ids: Iterable[int] | None = None
    # load.until while the stage runs (analysis.precision.Precision): fed each measured ok record
    # as it finishes, it ends the dispatch once ``reached``.
    until: Any = None
    # With ``duration_s``: how long the requests still in flight at the stage's end may run on
    # before they are cancelled (their records: ``cancelled``, the message says the stage cut
    # them). None waits for every one: a capacity screen past the cliff would drain a queue of
    # minutes to learn what its first seconds said.
    drain_s: float | None = None


def _samples() -> array.array[int]:
    return array.array("q")


@dataclass(slots=True)
class DriveResult:
    """What the driver saw. ``records`` holds every record only when the caller asked to keep
    them (a long run does not: its records live in requests.jsonl, 8 bytes per sample here)."""

    records: list[RequestRecord]
    started_ns: int
    ended_ns: int
    interrupted: bool
    wake_late_ns: array.array[int] = field(default_factory=_samples)  # open loop: timer lateness per send
    loop_lag_ns: array.array[int] = field(default_factory=_samples)  # event-loop probe overshoot samples
    sent: int = 0  # records emitted (every request handed to the backend)
    ok: int = 0
    max_id: int = -1  # the highest request id emitted
    precise: bool = False  # load.until was reached: the precision ended the dispatch
    until_at_stop: Any = None  # the interval (analysis.precision.Interval) the check saw then
    # This process's CPU seconds from the start of the dispatch to its last request's end: the
    # client's cost of the load alone (start-up, probing, workload building are before it).
    cpu_s: float = 0.0


class _Dispatch:
    """The driver's side of the ``Dispatcher`` protocol for one run of one shape."""

    def __init__(
        self,
        specs: SpecSource,
        backend: Backend,
        limits: Limits,
        stage: int,
        emit: Callable[[RequestRecord], None],
        res: DriveResult,
        worker: int = 0,
        on_start: Callable[[RequestRecord], None] | None = None,
        answers: AnswerPolicy = NO_ANSWERS,
    ) -> None:
        self._specs, self._backend, self._limits, self._stage = specs, backend, limits, stage
        self._worker, self._on_start, self._answers = worker, on_start, answers
        self._emit, self._res = emit, res
        total = None if limits.num_requests is None else limits.num_requests + limits.warmup_requests
        first = limits.first_id
        if limits.ids is not None:
            self._ids: Iterator[int] = iter(limits.ids)
        else:
            self._ids = iter(range(first, first + total) if total is not None else itertools.count(first))
        self._ramp_end_ns = res.started_ns + int(limits.ramp_s * 1e9)
        self._end_ns = None if limits.duration_s is None else res.started_ns + int(limits.duration_s * 1e9)
        self.in_flight: set[asyncio.Task[Any]] = set()
        self.stopping = False  # set once the run stops: no shape may send after it
        self.cut = False  # set when the drain limit ends the stage (Limits.drain_s)

    @property
    def started_ns(self) -> int:
        return self._res.started_ns

    def request_ids(self) -> Iterator[int]:
        return self._ids

    def past_end(self, t_ns: int) -> bool:
        if self.stopping:
            return True
        until = self._limits.until
        if until is not None and until.reached:
            self._res.precise, self._res.until_at_stop = True, until.last
            return True
        return self._end_ns is not None and t_ns >= self._end_ns

    def spec(self, i: int) -> RequestSpec:
        return self._specs.request(i)

    def wake_late(self, late_ns: int) -> None:
        self._res.wake_late_ns.append(late_ns)

    async def send(self, i: int, t_sched_ns: int, spec: RequestSpec | None = None) -> Answer | None:
        if spec is None:
            spec = self._specs.request(i)
        policy = self._answers
        # Read where the request needs it: scored, validated, or a conversation's history.
        read = (
            policy.keep
            or spec.expected is not None
            or spec.session_id is not None
            or spec.response_format is not None
        )
        rec = RequestRecord(
            id=i,
            worker=self._worker,
            # Warm-up: the stage's first warmup_requests, and whatever its ramp scheduled.
            warmup=i - self._limits.first_id < self._limits.warmup_requests or t_sched_ns < self._ramp_end_ns,
            t_sched_ns=t_sched_ns,
            t_send_ns=0,
            requested_output_tokens=spec.output_tokens,
            requested_prompt_tokens=spec.prompt_tokens,
            stage=self._stage,
            session_id=spec.session_id,
            turn=spec.turn,
            model=spec.model,
            items=spec.items,
            prompt_hash=prompt_hash(spec) if policy.keep else None,
            answer=[] if read else None,
        )
        set_media(rec, spec.media)
        answer = None
        live = self._backend.live
        live.in_flight += 1
        if self._on_start is not None:
            self._on_start(rec)
        try:
            await self._backend.send(spec, rec)
            answer = settle_answer(rec, spec, policy)
        except asyncio.CancelledError:
            if rec.error_class is None:
                rec.ok, rec.error_class = False, CANCELLED
                rec.error_message = "the run stopped while this request was in flight"
                rec.t_end_ns = rec.t_end_ns or now_ns()
            if self.cut and rec.error_class == CANCELLED:  # the backend said "the run stopped"
                rec.error_message = (
                    f"the stage cut it {self._limits.drain_s:g} s after its end (its drain limit), "
                    "still in flight"
                )
            raise
        finally:
            if rec.t_send_ns == 0:
                rec.t_send_ns = rec.t_sched_ns
            if answer is None and not policy.keep:
                rec.answer = rec.tool_call_args = None  # read but never settled: not kept
            live.in_flight -= 1
            self._emit(rec)
            if self._limits.until is not None and rec.ok and not rec.warmup:
                self._limits.until.add(rec)
        return answer

    def spawn(
        self, i: int, t_sched_ns: int, spec: RequestSpec, on_done: asyncio.Semaphore | None = None
    ) -> None:
        task = asyncio.create_task(self.send(i, t_sched_ns, spec))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        if on_done is not None:
            task.add_done_callback(lambda _t: on_done.release())

    async def drain(self) -> None:
        while self.in_flight:
            await asyncio.gather(*list(self.in_flight), return_exceptions=True)


async def drive(
    specs: SpecSource,
    backend: Backend,
    shape: LoadShape,
    limits: Limits,
    on_record: Callable[[RequestRecord], None] | None = None,
    stop: asyncio.Event | None = None,
    stage: int = 0,
    *,
    keep: bool = True,
    start_ns: int | None = None,
    worker: int = 0,
    on_start: Callable[[RequestRecord], None] | None = None,
    answers: AnswerPolicy = NO_ANSWERS,
) -> DriveResult:
    """Run ``shape`` until the limits or ``stop``; return the result, with every record when
    ``keep`` (each is also handed to ``on_record`` as it finished). Records carry ``stage`` and
    ``worker``. ``start_ns``: the stage's origin on the ``now_ns`` clock, shared by every worker
    process of a split stage (the driver waits for it); ``on_start`` sees each record as its
    request is handed to the backend (a worker process announces it to its parent); ``answers``:
    whether records keep their answer's text."""
    stop = stop or asyncio.Event()
    live = backend.live
    if start_ns is not None:
        await sleep_until(start_ns)
    res = DriveResult([], now_ns() if start_ns is None else start_ns, 0, False)
    cpu0 = time.process_time()

    emit = _emitter(res, live, on_record, keep)
    dispatch = _Dispatch(specs, backend, limits, stage, emit, res, worker, on_start, answers)
    main = asyncio.create_task(shape.run(dispatch))
    prober = asyncio.create_task(_probe_loop_lag(res))
    stopper = asyncio.create_task(stop.wait())
    cut_ns = None  # when the drain limit ends the stage (Limits.drain_s)
    if limits.drain_s is not None and limits.duration_s is not None:
        cut_ns = res.started_ns + int((limits.duration_s + limits.drain_s) * 1e9)
    try:
        timeout = None if cut_ns is None else max(0.0, (cut_ns - now_ns()) / 1e9)
        await asyncio.wait({main, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        dispatch.stopping = True
        dispatch.cut = cut_ns is not None and not main.done() and not stop.is_set()
        if not main.done() and not dispatch.cut:
            res.interrupted = True
        # The shape and every request it spawned end here, records written, before the caller
        # may close the records file.
        await cancel_all([main, *dispatch.in_flight])
        res.cpu_s = time.process_time() - cpu0
        await cancel_all([stopper, prober])
    if main.done() and not main.cancelled() and main.exception() is not None:
        raise main.exception()  # type: ignore[misc]
    res.ended_ns = now_ns()
    return res


def _emitter(
    res: DriveResult, live: Live, on_record: Callable[[RequestRecord], None] | None, keep: bool
) -> Callable[[RequestRecord], None]:
    """What happens to each finished record: kept (when ``keep``), counted in ``res`` and in
    the live view, then handed to ``on_record``."""
    records = res.records

    def emit(rec: RequestRecord) -> None:
        if keep:
            records.append(rec)
        res.sent += 1
        res.ok += rec.ok
        res.max_id = max(res.max_id, rec.id)
        live.finish(not rec.ok and rec.error_class != CANCELLED, rec.counted_output_tokens)
        if on_record is not None:
            on_record(rec)

    return emit


async def _probe_loop_lag(res: DriveResult) -> None:
    """Until cancelled: how late the event loop wakes a sleep of ``_LOOP_PROBE_S``, into
    ``res.loop_lag_ns`` (the client's own delay, beside what it measures)."""
    while True:
        t = now_ns()
        await asyncio.sleep(_LOOP_PROBE_S)
        res.loop_lag_ns.append(max(0, now_ns() - t - int(_LOOP_PROBE_S * 1e9)))
