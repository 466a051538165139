"""Which stage runs next, and how: the plan of a multi-stage run.

A plan is asked for the next stage after each one ends, with every outcome so far, so a plan
can be a fixed list (``FixedPlan``: a profile's stages or sweep) or decide as it goes (the
capacity search brackets and bisects on what it measured). ``shape_for`` turns one stage into
the load shape and the limits the driver runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from loadgen.analysis.precision import Precision, record_value
from loadgen.config import WorkloadConfig
from loadgen.config.stages import TRACE, Stage
from loadgen.config.until import parse_until
from loadgen.runner.driver import DriveResult, Limits
from loadgen.runner.sessions import Sessions
from loadgen.runner.shapes import ClosedLoop, LoadShape, OpenLoop
from loadgen.summary import Capacity, StageSummary
from loadgen.workload import Workload, stage_schedule

if TYPE_CHECKING:
    from loadgen.analysis.table import RecordTable


@dataclass(slots=True)
class StageOutcome:
    """A stage as it ran: what was asked, the driver's result, and where its records are: one
    contiguous byte span of requests.jsonl (stages never overlap), read back on demand, and
    the same records as a row span (``rows``): where they are once the run compacted its
    records into the store (``path`` is then the store)."""

    stage: Stage
    result: DriveResult
    path: Path | None = None
    span: tuple[int, int] = (0, 0)
    rows: tuple[int, int] = (0, 0)

    def table(self) -> RecordTable:
        """The stage's records, columnar (kept in the result when the driver kept them)."""
        from loadgen.analysis.record_store import STORE, read_store
        from loadgen.analysis.table import RecordTable

        if self.path is None:
            return RecordTable.from_records(self.result.records)
        if self.path.name == STORE:
            return read_store(self.path, self.rows)
        return RecordTable.from_file(self.path, start=self.span[0], end=self.span[1])


class StagePlan(Protocol):
    def next_stage(self, done: Sequence[StageOutcome]) -> Stage | None:
        """The stage to run after ``done``, or None when the run is over."""
        ...

    def conclude(self, interrupted: bool) -> Capacity | None:
        """The block the plan adds to the summary once its stages ran (the capacity search's
        result), or None; ``runner/summarize.py`` puts it in, as it does every block."""
        ...

    def curve_order(self, stages: Sequence[StageSummary]) -> list[StageSummary]:
        """The stages in the order the latency-throughput curve reads them."""
        ...


@dataclass(frozen=True, slots=True)
class FixedPlan:
    """The stages in order, whatever they measure."""

    stages: Sequence[Stage]

    def next_stage(self, done: Sequence[StageOutcome]) -> Stage | None:
        return self.stages[len(done)] if len(done) < len(self.stages) else None

    def conclude(self, interrupted: bool) -> Capacity | None:
        return None

    def curve_order(self, stages: Sequence[StageSummary]) -> list[StageSummary]:
        return list(stages)  # the order they ran in, as the profile gave them


def precision_for(text: str | None) -> Precision | None:
    """A fresh ``--until`` tracker for one stage, or None."""
    if text is None:
        return None
    until = parse_until(text)
    return Precision(until, record_value(until.metric))


def shape_for(
    stage: Stage, previous: Stage | None, first_id: int, seed: int, workload: Workload | None = None
) -> tuple[LoadShape, Limits]:
    """The load shape and limits of ``stage``; a ramp starts from ``previous``'s level when
    it is of the same kind (concurrency after concurrency, rate after rate), else from 0.
    ``workload``: a trace's schedule, or the session plan whose conversations the load runs."""
    limits = Limits(
        num_requests=stage.num_requests,
        duration_s=stage.duration_s,
        warmup_requests=stage.warmup_requests,
        first_id=first_id,
        ramp_s=stage.ramp_s,
        until=precision_for(stage.until),
        drain_s=stage.drain_s,
    )
    if stage.arrival == TRACE:
        schedule = workload.schedule_ns() if workload is not None else None
        if schedule is None:
            raise ValueError("a trace stage needs the workload that read the trace")
        return OpenLoop(schedule, stage.max_concurrency), limits
    sessions = workload.sessions if workload is not None else None
    if sessions is not None:
        if stage.concurrency is not None:
            return Sessions(sessions, concurrency=stage.concurrency), limits
        return Sessions(sessions, schedule_ns=stage_schedule(stage, seed)), limits
    if stage.concurrency is not None:
        ramp_from = previous.concurrency if previous is not None and previous.concurrency else 0
        return ClosedLoop(stage.concurrency, ramp_s=stage.ramp_s, ramp_from=ramp_from), limits
    rate_from = previous.rate if previous is not None and previous.rate else 0.0
    schedule = stage_schedule(stage, seed, rate_from)
    assert schedule is not None  # an open-loop stage has a rate
    return OpenLoop(schedule, stage.max_concurrency), limits


def connections(stages: Sequence[Stage], work: WorkloadConfig) -> int | None:
    """The pool's cap for a run: ``pool_size``, except for a trace DAG's replay, whose parallel
    calls share their session's slot. The sessions already bound what is in flight there; a cap
    of one connection a slot would queue a session's parallel calls behind each other inside
    the client, after their send was stamped, and add that wait to their latencies."""
    if work.agentic is not None and work.agentic.kind == "otlp":
        return None
    return pool_size(stages)


def pool_size(stages: Sequence[Stage]) -> int | None:
    """Connections the run needs at most: the largest concurrency or in-flight cap; None (no
    cap) when any open-loop stage is uncapped, since a capped pool would queue silently."""
    sizes = []
    for s in stages:
        size = s.concurrency if s.concurrency is not None else s.max_concurrency
        if size is None:
            return None
        sizes.append(size)
    return max(sizes) if sizes else None
