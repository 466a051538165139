"""Who drives a stage's load: this process (``InProcess``), or worker processes or Ray actors
(``Workers``, over ``pool.py``). ``execute`` runs every stage through one of them and cannot
tell the difference: either way each finished request's record reaches requests.jsonl as it
finishes, and the stage's result carries the counts and the client's own timing figures.
"""

from __future__ import annotations

import array
import asyncio
import math
import os
from collections.abc import Callable
from typing import Any, Protocol

from loadgen.errors import RunError
from loadgen.records import JsonlSink, RequestRecord
from loadgen.runner.answers import answer_policy
from loadgen.runner.channel import Channel, ProcessChannel
from loadgen.runner.driver import DriveResult, Limits, drive
from loadgen.runner.plan import connections
from loadgen.runner.pool import WorkerPool
from loadgen.runner.prepare import Prepared
from loadgen.runner.shapes import LoadShape
from loadgen.runner.split import SlotIds, split
from loadgen.runner.worker import WorkerJob, identity


class Fleet(Protocol):
    size: int

    async def run(self, stage: int, shape: LoadShape, limits: Limits, stop: asyncio.Event) -> DriveResult: ...

    def figures(self, wall_s: float) -> list[dict[str, Any]]:
        """Per worker: where it ran, its CPU, event-loop lag and timer lateness, its clock."""
        ...

    def lost(self) -> list[str]:
        """One sentence per worker lost during the run."""
        ...

    async def aclose(self) -> None: ...


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_workers(requested: int | str) -> int:
    """``auto``: the usable cores minus one for the parent and the rest of the machine, >= 1."""
    return max(1, usable_cores() - 1) if requested == "auto" else int(requested)


class InProcess:
    """One worker: the loadgen process itself, on the prepared transport and adapter."""

    size = 1

    def __init__(self, p: Prepared, keep: Callable[[RequestRecord], None]) -> None:
        self._p, self._keep = p, keep
        self._results: list[DriveResult] = []

    async def run(self, stage: int, shape: LoadShape, limits: Limits, stop: asyncio.Event) -> DriveResult:
        p = self._p
        res = await drive(
            p.specs,
            p.sender,
            shape,
            limits,
            on_record=self._keep,
            stop=stop,
            stage=stage,
            keep=False,
            answers=answer_policy(p.profile),
        )
        self._results.append(res)
        return res

    def figures(self, wall_s: float) -> list[dict[str, Any]]:
        return [
            _figures(
                0,
                "this process",
                identity(),
                sum(r.cpu_s for r in self._results),  # over the sending windows, as the driver took it
                wall_s,
                self._results,
                {},
                None,
            )
        ]

    def lost(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None


class Workers:
    """Worker processes (or actors): each stage split among those still alive."""

    def __init__(self, p: Prepared, pool: WorkerPool) -> None:
        self._p, self.pool = p, pool
        self.size = len(pool.workers)

    @classmethod
    async def start(
        cls,
        p: Prepared,
        n: int,
        sink: JsonlSink,
        keep: Callable[[RequestRecord], None],
        channels: list[Channel] | None = None,
        on_lines: Callable[[bytes], None] | None = None,
    ) -> Workers:
        """``on_lines``: sees the record lines the workers send, after they are written (a live
        view parses them here, in the parent, which drives no load)."""
        if channels is None:
            channels = list(await asyncio.gather(*(ProcessChannel.spawn() for _ in range(n))))
        write_line: Callable[[bytes, int], None] = sink.write_line
        if on_lines is not None:
            see = on_lines

            def write_and_see(lines: bytes, records: int = 1) -> None:
                sink.write_line(lines, records)
                see(lines)

            write_line = write_and_see
        pool = WorkerPool(channels, write_line, keep, p.live)
        size = connections(p.stages, p.profile.workload)
        per_worker = None if size is None else math.ceil(size / n)
        jobs = [WorkerJob(k, p.profile, p.target, p.model, per_worker) for k in range(n)]
        try:
            await pool.start(jobs)
        except BaseException:
            await pool.close()
            raise
        return cls(p, pool)

    async def run(self, stage: int, shape: LoadShape, limits: Limits, stop: asyncio.Event) -> DriveResult:
        alive = self.pool.alive()
        if not alive:
            raise RunError("every worker was lost: " + "; ".join(self.lost()))
        parts = split(shape, limits, len(alive), self._p.profile.workload.seed, stage)
        fitted = getattr(self._p.specs, "fitted", None) or {}
        shares = [(part, _fitted_for(fitted, part[1])) if part is not None else None for part in parts]
        res, _ = await self.pool.run_stage(stage, shares, stop)
        return res

    def figures(self, wall_s: float) -> list[dict[str, Any]]:
        out = []
        for w in self.pool.workers:
            cpu = sum(s.cpu_s for s in w.stages)
            out.append(
                _figures(
                    w.index,
                    w.channel.label,
                    w.info,
                    cpu,
                    wall_s,
                    [s.result for s in w.stages],
                    w.clock,
                    w.lost,
                )
            )
        return out

    def lost(self) -> list[str]:
        return [
            f"worker {w.index} ({w.channel.label}) was lost: {w.lost}" for w in self.pool.workers if w.lost
        ]

    async def aclose(self) -> None:
        await self.pool.close()


def _fitted_for(fitted: dict[int, Any], limits: Limits) -> dict[int, Any]:
    """The server-fitted specs of the ids in a worker's share (each goes to one worker)."""
    if not fitted or limits.ids is None:
        return {}
    ids = limits.ids if isinstance(limits.ids, SlotIds) else set(limits.ids)
    return {i: spec for i, spec in fitted.items() if i in ids}


def _figures(
    index: int,
    where: str,
    info: dict[str, Any],
    cpu_s: float,
    wall_s: float,
    results: list[DriveResult],
    clock: dict[str, Any],
    lost: str | None,
) -> dict[str, Any]:
    loop_lag, wake = array.array("q"), array.array("q")
    for r in results:
        loop_lag.extend(r.loop_lag_ns)
        wake.extend(r.wake_late_ns)
    return {
        "worker": index,
        "where": where,
        "pid": info.get("pid"),
        "host": info.get("host"),
        "node": info.get("node_ip"),  # a Ray actor's node
        "cpu_seconds": cpu_s,
        "cpu_busy_fraction": cpu_s / max(wall_s, 1e-9),
        "loop_lag_ns": loop_lag,
        "wake_late_ns": wake,
        "clock": clock or None,
        "lost": lost,
    }
