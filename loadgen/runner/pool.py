"""The parent's side of a multi-worker run: start workers, anchor their clocks, hand each its
share of every stage, and merge what streams back into the one run folder.

A worker is reached through a ``Channel`` (``channel.py``: ``ProcessChannel``, a child process
and two pipes; a Ray actor elsewhere), so the pool neither knows nor cares where it runs. What the pool
guarantees:

- **Raw records, merged once.** Each record's JSON line goes to requests.jsonl as it arrives
  (the parent never summarises a worker's figures: the summary is computed from the merged
  file exactly as for one process, so every statistic means what it means there).
- **One clock.** At start the parent pings each worker (NTP-style, the sample with the
  shortest round trip wins) and records the offset it measured, its error bound (half that
  round trip) and the shift applied. A worker on this machine reads the same CLOCK_MONOTONIC,
  so it is applied no shift and the measurement shows the offset is zero within its bound; a
  worker on another machine is told the shift, and its records arrive on the parent's clock.
- **Losing a worker costs its own requests, never the run.** Every request a worker starts is
  announced before it is sent; when a worker's stream ends without its stage finishing (killed,
  crashed, node lost), each request it announced and never recorded is written as failed with
  class ``worker_lost``, its unsent share is not sent, the others go on, and the run says so
  (it is incomplete: the load asked for was not applied).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.backends.stream import Live
from loadgen.clock import now_ns
from loadgen.errors import RunError
from loadgen.records import WORKER_LOST, RequestRecord
from loadgen.runner import frames
from loadgen.runner.channel import Channel, ProcessChannel
from loadgen.runner.driver import DriveResult, Limits
from loadgen.runner.shapes import LoadShape
from loadgen.runner.worker import StageOrder, StageStats, WorkerJob, identity

# Channel and ProcessChannel (channel.py) stay importable from here, where they were first.
__all__ = ["Channel", "ProcessChannel", "WorkerPool", "WorkerState", "merge"]

_PINGS = 8
_START_LEAD_NS = 100_000_000  # a stage starts this long after its orders go out
_HELLO_TIMEOUT_S = 60.0


@dataclass(slots=True)
class WorkerState:
    """What the parent knows of one worker."""

    index: int
    channel: Channel
    info: dict[str, Any] = field(default_factory=dict)  # identity: pid, host, boot_id
    clock: dict[str, Any] = field(default_factory=dict)
    lost: str | None = None  # why it was lost, once it was
    stages: list[StageStats] = field(default_factory=list)
    in_flight: dict[int, tuple[int, int, int, int, int]] = field(default_factory=dict)
    inbox: asyncio.Queue[tuple[int, bytes] | None] = field(default_factory=asyncio.Queue)
    done: asyncio.Future[StageStats | None] | None = None
    stage: int = 0


class WorkerPool:
    """N workers behind channels; records go to ``write_line`` (requests.jsonl) as they come."""

    def __init__(
        self,
        channels: list[Channel],
        write_line: Callable[[bytes, int], None],
        write_record: Callable[[RequestRecord], None],
        live: Live,
    ) -> None:
        self.workers = [WorkerState(k, ch) for k, ch in enumerate(channels)]
        self._write_line, self._write_record, self.live = write_line, write_record, live
        self._readers: list[asyncio.Task[None]] = []
        self._tally = DriveResult([], 0, 0, False)  # this stage's counts, lost requests included
        self._closing = False  # after QUIT a worker's stream ends because it was told to
        self._pending: list[bytes] = []  # record lines routed, not yet written (see _flush)

    async def start(self, jobs: list[WorkerJob]) -> None:
        """Wait for every worker's hello, anchor its clock, hand it its job; a RunError names
        the worker that could not start."""
        self._readers = [asyncio.create_task(self._read(w)) for w in self.workers]
        here = identity()
        for w, job in zip(self.workers, jobs):
            hello = await self._expect(w, frames.HELLO, _HELLO_TIMEOUT_S)
            w.info = frames.unpickle(hello)
            same = here["boot_id"] is not None and w.info.get("boot_id") == here["boot_id"]
            w.clock = await self._anchor(w, same)
            job.clock_shift_ns = w.clock["shift_applied_ns"]
            w.channel.send(frames.pickled(frames.JOB, job))
            await self._expect(w, frames.READY, _HELLO_TIMEOUT_S)

    async def _expect(self, w: WorkerState, kind: int, timeout_s: float) -> bytes:
        try:
            got = await asyncio.wait_for(w.inbox.get(), timeout_s)
        except asyncio.TimeoutError:  # on Python 3.10 wait_for raises this, not TimeoutError
            raise RunError(
                f"worker {w.index} ({w.channel.label}) did not answer within {timeout_s:g} s"
            ) from None
        if got is None:
            raise RunError(
                f"worker {w.index} ({w.channel.label}) could not start: {await w.channel.lost_reason()}"
            )
        if got[0] == frames.FAILED:
            raise RunError(f"worker {w.index} ({w.channel.label}) could not start: {frames.unpickle(got[1])}")
        if got[0] != kind:
            raise RunError(f"worker {w.index} ({w.channel.label}) answered frame {got[0]!r}, not {kind!r}")
        return got[1]

    async def _anchor(self, w: WorkerState, same: bool) -> dict[str, Any]:
        best: tuple[int, int] | None = None  # (round trip, offset)
        for _ in range(_PINGS):
            t0 = now_ns()
            w.channel.send(frames.frame(frames.PING))
            (theirs,) = frames.PONG_STRUCT.unpack(await self._expect(w, frames.PONG, 10.0))
            t1 = now_ns()
            sample = (t1 - t0, theirs - (t0 + t1) // 2)
            best = sample if best is None or sample[0] < best[0] else best
        assert best is not None
        rtt, offset = best
        return {
            "same_clock": same,  # the same booted kernel: one CLOCK_MONOTONIC
            "offset_ns": offset,  # worker minus parent, as measured
            "error_bound_ns": rtt // 2,
            "shift_applied_ns": 0 if same else -offset,
        }

    async def _read(self, w: WorkerState) -> None:
        """Route one worker's frames: records to the file at once, the rest to its inbox."""
        try:
            await self._route(w)
        except Exception as exc:  # noqa: BLE001 - an unreadable frame: this worker cannot be trusted
            w.lost = f"its stream could not be read ({type(exc).__name__}: {exc})"
            await w.channel.close()
        if self._closing and w.lost is None:
            return
        w.lost = w.lost or await w.channel.lost_reason()
        self._account_lost(w)
        w.inbox.put_nowait(None)
        if w.done is not None and not w.done.done():
            w.done.set_result(None)

    async def _route(self, w: WorkerState) -> None:
        live, started_struct, record_struct = self.live, frames.STARTED_STRUCT, frames.RECORD_STRUCT
        async for kind, payload in w.channel.frames():
            if kind == frames.RECORD:
                rid, status, tokens = record_struct.unpack_from(payload)
                w.in_flight.pop(rid, None)
                self._pending.append(payload[record_struct.size :])
                if len(self._pending) == 1:
                    asyncio.get_running_loop().call_soon(self._flush)
                self._count(rid, status == frames.OK)
                live.in_flight -= 1
                live.finish(status == frames.FAILED_, tokens)
            elif kind == frames.STARTED:
                fields = started_struct.unpack(payload)
                w.in_flight[fields[0]] = fields
                live.in_flight += 1
            elif kind == frames.DONE:
                self._flush()  # the stage's records are in the file before it counts as done
                if w.done is not None and not w.done.done():
                    w.done.set_result(frames.unpickle(payload))
            else:
                w.inbox.put_nowait((kind, payload))

    def _flush(self) -> None:
        """Write the record lines that arrived since the last flush in one write(2): the lines
        one read of the pipes delivered. Scheduled with ``call_soon`` on the first of them, so
        it runs as soon as the frames already read are routed; a line is never held longer."""
        if self._pending:
            lines, self._pending = self._pending, []
            self._write_line(b"".join(lines), len(lines))

    def _account_lost(self, w: WorkerState) -> None:
        """Every request the lost worker announced and never recorded: one worker_lost record."""
        self._flush()
        t = now_ns()
        for rid, t_sched, warmup, req_out, req_prompt in w.in_flight.values():
            rec = RequestRecord(
                id=rid,
                warmup=bool(warmup),
                t_sched_ns=t_sched,
                t_send_ns=t_sched,
                requested_output_tokens=req_out,
                requested_prompt_tokens=req_prompt,
                error_class=WORKER_LOST,
                error_message=f"worker {w.index} ({w.channel.label}) was lost while this request "
                f"was in flight: {w.lost}",
                t_end_ns=t,
                worker=w.index,
                stage=w.stage,
            )
            self._write_record(rec)
            self._count(rid, False)
            self.live.in_flight -= 1
            self.live.finish(True, 0)
        w.in_flight.clear()

    def _count(self, rid: int, ok: bool) -> None:
        tally = self._tally
        tally.sent += 1
        tally.ok += ok
        tally.max_id = max(tally.max_id, rid)

    def alive(self) -> list[WorkerState]:
        return [w for w in self.workers if w.lost is None]

    async def run_stage(
        self,
        stage: int,
        parts: list[tuple[tuple[LoadShape, Limits], dict[int, Any]] | None],
        stop: asyncio.Event,
    ) -> tuple[DriveResult, list[StageStats]]:
        """Run one stage split as ``parts`` (per alive worker, in order: its shape and limits,
        and the server-fitted specs of its ids) and merge it."""
        loop = asyncio.get_running_loop()
        start_ns = now_ns() + _START_LEAD_NS
        self._tally = DriveResult([], start_ns, 0, False)
        busy: list[WorkerState] = []
        for w, part in zip(self.alive(), parts):
            if part is None:
                continue
            w.stage, w.done = stage, loop.create_future()
            (shape, limits), fitted = part
            w.channel.send(frames.pickled(frames.STAGE, StageOrder(stage, shape, limits, start_ns, fitted)))
            busy.append(w)
        waiting: asyncio.Future[list[StageStats | None]] = asyncio.gather(
            *(w.done for w in busy if w.done is not None)
        )
        stopper: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        pending: list[asyncio.Future[Any]] = [waiting, stopper]
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            for w in self.alive():
                w.channel.send(frames.frame(frames.STOP))
        results = await waiting
        stopper.cancel()
        stats = [s for s in results if s is not None]
        for s in stats:
            self.workers[s.worker].stages.append(s)
        failed = [s for s in stats if s.error is not None]
        if failed:
            raise RunError(f"worker {failed[0].worker} failed: {failed[0].error}")
        return merge(self._tally, stats, lost=any(w.lost for w in busy)), stats

    async def close(self) -> None:
        self._closing = True
        self._flush()
        await asyncio.gather(*(w.channel.close() for w in self.workers), return_exceptions=True)
        for t in self._readers:
            t.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


def merge(tally: DriveResult, stats: list[StageStats], lost: bool) -> DriveResult:
    """The workers' results of one stage as one. ``tally`` is the pool's own account of the
    stage (its shared start and the records it routed, a lost worker's included, which no
    worker's stats can report); the workers add the end, interruption and probe samples."""
    tally.ended_ns = max((s.result.ended_ns for s in stats), default=now_ns())
    tally.interrupted = lost or any(s.result.interrupted for s in stats)
    for s in stats:
        tally.wake_late_ns.extend(s.result.wake_late_ns)
        tally.loop_lag_ns.extend(s.result.loop_lag_ns)
    return tally
