"""A worker process: drives its share of each stage and streams every record to its parent.

Started by ``pool.py`` (``python -c "from loadgen.runner.worker import main; main()"``); frames
(``frames.py``) come in
on stdin and go out on the original stdout (fd 1 is pointed at stderr, so a stray print can
never corrupt the stream). The worker gets the validated profile and the model the parent's
probe settled on, builds its own transport, protocol adapter and workload (spec ``i`` is the
same in every process; prompts the parent fitted to the server's /tokenize arrive with the
job), and runs the same driver as a one-process run. It never decides anything about the run:
it ignores Ctrl-C (the terminal sends it to the whole process group; the parent then says
STOP) and dies with its parent (a killed loadgen leaves no load running behind it).

Clocks: every timestamp is ``now_ns`` of the process that owns the socket. Processes on one
machine share CLOCK_MONOTONIC, so a worker's timestamps need no correction and the parent
only measures that (``pool.py``). A worker on another machine (Ray) is told a shift to add to
each of its timestamps, so records arrive on the parent's clock; a latency is a difference
of two timestamps of one process, so a shift never enters it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.backends import registry
from loadgen.backends.stream import Live
from loadgen.clock import now_ns, run_loop
from loadgen.config import Profile
from loadgen.memory import frozen_for_the_load
from loadgen.records import CANCELLED, RequestRecord, RequestSpec
from loadgen.runner import frames
from loadgen.runner.answers import answer_policy
from loadgen.runner.driver import Backend, DriveResult, Limits, drive
from loadgen.runner.prepare import Target, token_counter
from loadgen.runner.replicas import Balanced, balanced
from loadgen.runner.shapes import LoadShape
from loadgen.server.tokenize import FittedSpecs
from loadgen.workload import Workload

_TIME_FIELDS = (
    "t_sched_ns",
    "t_send_ns",
    "t_first_byte_ns",
    "t_first_token_ns",
    "t_first_content_ns",
    "t_first_tool_ns",
    "t_end_ns",
    "t_conn_start_ns",  # the HTTP phases (records.py)
    "t_dns_ns",
    "t_connect_ns",
    "t_tls_ns",
    "t_written_ns",
    "t_last_byte_ns",
)


@dataclass(slots=True)
class WorkerJob:
    """Everything a worker needs to send requests like the parent would."""

    index: int
    profile: Profile
    target: Target  # the URL, the headers with their credentials, and their scrubber
    model: str
    max_connections: int | None
    clock_shift_ns: int = 0  # added to every timestamp (0 on the parent's machine)


@dataclass(slots=True)
class StageOrder:
    stage: int
    shape: LoadShape
    limits: Limits
    start_ns: int  # the stage's origin, on the parent's clock
    fitted: dict[int, RequestSpec] = field(default_factory=dict)  # server-fitted specs of its ids


@dataclass(slots=True)
class StageStats:
    """A worker's account of one stage (its records went ahead of it, one frame each)."""

    worker: int
    result: DriveResult
    cpu_s: float
    error: str | None = None  # the driver raised: the stage is not trustworthy for this worker


def identity() -> dict[str, Any]:
    """Who this process is and which monotonic clock it reads (one per booted kernel)."""
    boot_id = None
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as fh:
        boot_id = fh.read().strip()
    return {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": boot_id}


class Worker:
    """The worker's state between frames: its job's transport, adapter and specs."""

    def __init__(self, job: WorkerJob, send: Callable[[bytes], None]) -> None:
        self.job, self._send = job, send
        p, target = job.profile, job.target
        opts = dataclasses.replace(target.opts, max_connections=job.max_connections)
        backend_cls = registry.backend(p.target.endpoint)
        self.transport = backend_cls.open_transport(p.target.transport, opts)
        workload = Workload(
            p.workload, p.target.endpoint, p.target.prompt_format, p.workload.prompt.tokenizer
        )
        self.live = Live()
        self.backend = backend_cls.for_target(
            p.target, job.model, self.transport, self.live, token_counter(workload)
        )
        self.sender: Backend = self.backend
        self.balanced: Balanced | None = None
        if target.replicas:  # target.urls: this worker balances its own share over them
            t, counter = p.target, token_counter(workload)
            cap = job.max_connections
            others = [
                backend_cls.open_transport(t.transport, dataclasses.replace(o, max_connections=cap))
                for o in target.replicas[1:]
            ]
            self.sender = self.balanced = balanced(
                t.balance,
                self.backend,
                others,
                lambda tr: backend_cls.for_target(t, job.model, tr, self.live, counter),
                (t.eject_after, t.eject_s),
            )
        self.specs = FittedSpecs(workload, {})
        self._scrub = target.scrubber.scrub_record

    async def ready(self) -> None:
        await (self.balanced or self.backend).ready()

    async def aclose(self) -> None:
        try:
            if self.balanced is not None:
                await self.balanced.aclose()
        finally:
            await self.transport.aclose()
        self.stop: asyncio.Event | None = None

    def _record(self, rec: RequestRecord) -> None:
        self._scrub(rec)
        shift = self.job.clock_shift_ns
        if shift:
            _shift(rec, shift)
        status = (
            frames.OK if rec.ok else frames.CANCELLED_ if rec.error_class == CANCELLED else frames.FAILED_
        )
        head = frames.RECORD_STRUCT.pack(rec.id, status, rec.counted_output_tokens)
        self._send(frames.frame(frames.RECORD, head + rec.to_json() + b"\n"))

    def _started(self, rec: RequestRecord) -> None:
        t_sched = rec.t_sched_ns + self.job.clock_shift_ns
        body = frames.STARTED_STRUCT.pack(
            rec.id, t_sched, rec.warmup, rec.requested_output_tokens, rec.requested_prompt_tokens
        )
        self._send(frames.frame(frames.STARTED, body))

    async def run_stage(self, order: StageOrder) -> None:
        self.stop = stop = asyncio.Event()
        self.specs.fitted.update(order.fitted)
        cpu0 = time.process_time()
        error = None
        try:
            with frozen_for_the_load():
                res = await drive(
                    self.specs,
                    self.sender,
                    order.shape,
                    order.limits,
                    on_record=self._record,
                    stop=stop,
                    stage=order.stage,
                    keep=False,
                    start_ns=order.start_ns - self.job.clock_shift_ns,
                    worker=self.job.index,
                    on_start=self._started,
                    answers=answer_policy(self.job.profile),
                )
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run with it
            error = f"{type(exc).__name__}: {exc}"
            res = DriveResult([], order.start_ns, now_ns(), True)
        shift = self.job.clock_shift_ns
        res.started_ns, res.ended_ns = res.started_ns + shift, res.ended_ns + shift
        # The stage's CPU over its sending window (the driver's), not the collection before it.
        cpu_s = res.cpu_s if error is None else time.process_time() - cpu0
        stats = StageStats(self.job.index, res, cpu_s, error)
        self._send(frames.pickled(frames.DONE, stats))


def _shift(rec: RequestRecord, shift: int) -> None:
    for name in _TIME_FIELDS:
        value = getattr(rec, name)
        if value:
            setattr(rec, name, value + shift)
    rec.chunk_times_ns = [t + shift for t in rec.chunk_times_ns]
    rec.reasoning_times_ns = [t + shift for t in rec.reasoning_times_ns]


class _Out(asyncio.Protocol):
    """The write end: asyncio buffers what the pipe cannot take yet, so a slow parent never
    blocks the worker's event loop (which would delay the timestamps it takes)."""


async def serve(reader: asyncio.StreamReader, send: Callable[[bytes], None]) -> None:
    """Answer the parent's frames until QUIT or the end of stdin (the parent is gone)."""
    send(frames.pickled(frames.HELLO, identity()))
    worker: Worker | None = None
    stage: asyncio.Task[None] | None = None
    while (got := await frames.read_frame(reader)) is not None:
        kind, payload = got
        if kind == frames.PING:
            send(frames.frame(frames.PONG, frames.PONG_STRUCT.pack(now_ns())))
        elif kind == frames.JOB:
            try:
                worker = Worker(frames.unpickle(payload), send)
                await worker.ready()
            except Exception as exc:  # noqa: BLE001 - the parent says why this worker cannot start
                send(frames.pickled(frames.FAILED, f"{type(exc).__name__}: {exc}"))
                return
            send(frames.pickled(frames.READY, None))
        elif kind == frames.STAGE and worker is not None:
            stage = asyncio.create_task(worker.run_stage(frames.unpickle(payload)))
        elif kind == frames.STOP and worker is not None and worker.stop is not None:
            worker.stop.set()
        elif kind == frames.QUIT:
            break
    if stage is not None and not stage.done():
        stage.cancel()
        await asyncio.gather(stage, return_exceptions=True)
    if worker is not None:
        await worker.aclose()


async def _main(out_fd: int) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", 0))
    out, _ = await loop.connect_write_pipe(_Out, os.fdopen(out_fd, "wb", 0))
    try:
        await serve(reader, out.write)
    finally:
        out.close()


def main() -> None:
    from loadgen.orphans import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    run_loop(_main(out_fd))
