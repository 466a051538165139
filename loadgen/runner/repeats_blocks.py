"""How a repeated run's parent pools each optional block: one ordered list, keyed by the names
``runner/blocks.py`` builds, and for every block it does not pool, why.

A run builds its blocks from its records (``blocks.BLOCKS``); the parent of repeated runs pools
them, each by its rule (``repeats``' docstring): from the pooled records as a run would (quality,
models, media, each stage's figures), or from the repeats' own blocks where the records cannot
say it (fidelity, server, a stage's saturation and steady state), or counted across repeats
(sessions: a session id names a conversation of one repeat). ``tests/unit/test_block_seam.py``
fails when a block of ``BLOCKS`` is in neither ``POOLED`` nor ``NOT_POOLED``, so a new block is
pooled, or said not to be, when it is added.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from loadgen.analysis import client_means, curve, metrics, traffic
from loadgen.analysis import repeats as rp
from loadgen.analysis import sla as sla_mod
from loadgen.analysis.media import media as media_block
from loadgen.analysis.models import models as models_block
from loadgen.analysis.phases import http_phases
from loadgen.analysis.table import RecordTable
from loadgen.config import Profile
from loadgen.result import RunResult
from loadgen.summary import (
    Curve,
    Distribution,
    Fidelity,
    Media,
    Models,
    Quality,
    ServerView,
    Sessions,
    StageSummary,
)


@dataclass(frozen=True)
class PooledRun:
    """What every pooling reads: the repeats that finished, their records pooled (``lengths``:
    each repeat's count of them, in order) and the run's settings."""

    profile: Profile
    ran: Sequence[RunResult]
    table: RecordTable
    lengths: list[int]
    sla: sla_mod.Sla | None
    seconds: float  # the repeats' measured windows summed
    streamed: bool


Built = Mapping[str, object]
Pooler = Callable[[PooledRun, Built], object]


def _stages(p: PooledRun, _built: Built) -> list[StageSummary] | None:
    staged = bool(p.profile.load.stages) or p.profile.load.sweep is not None
    return pooled_stages(p.ran, p.table, p.sla, p.streamed) if staged else None


def pooled_stages(
    ran: Sequence[RunResult], table: RecordTable, sla: sla_mod.Sla | None, streamed: bool
) -> list[StageSummary]:
    """Stage i of every repeat as one stage: its counts, window, metrics and SLA from the
    repeats' records of that stage (per second of their stage windows summed); its saturation
    and steady state from the repeats' own (``analysis.repeats.pool_saturation``, ``pool_steady``).
    A repeat stopped midway adds the stages it reached."""
    per: list[list[Any]] = [list(r.summary.get("stages") or []) for r in ran]
    stage_of = table.column("stage")
    out: list[StageSummary] = []
    for i in range(max(len(s) for s in per)):
        mine = [(r.run_dir.name, s[i]) for r, s in zip(ran, per) if len(s) > i]
        ref = mine[0][1]
        interrupted = any(s.get("interrupted", False) for _p, s in mine)
        seconds = sum(float((s.get("window") or {}).get("seconds") or 0.0) for _p, s in mine)
        m = metrics.summarize(
            table.select(stage_of == ref["index"]),
            sla=sla,
            incomplete=interrupted,
            seconds=seconds,
            streamed=streamed,
        )
        block: StageSummary = {
            "index": ref["index"],
            "name": ref["name"],
            "load": ref["load"],
            "interrupted": interrupted,
            "counts": m["counts"],
            "window": m["window"],
            "metrics": m["metrics"],
            "sla": m["sla"],
            "steady_state": rp.pool_steady([(p, s["steady_state"]) for p, s in mine]),
        }
        if all("saturation" in s for _p, s in mine):
            block["saturation"] = cast(Any, rp.pool_saturation([(p, s["saturation"]) for p, s in mine]))
        out.append(block)
    return out


def _curve(_p: PooledRun, built: Built) -> Curve | None:
    stages = cast("list[StageSummary] | None", built.get("stages"))
    return None if stages is None else curve.curve(stages)


def _quality(p: PooledRun, _built: Built) -> Quality | None:
    answers = p.profile.output.answers
    first = p.ran[0].summary.get("quality")
    modelled = first.get("modelled") if first else None  # the simulator's, as run
    return traffic.quality(p.table, answers_kept=answers.keep, max_chars=answers.max_chars, modelled=modelled)


def _sessions(p: PooledRun, _built: Built) -> Sessions | None:
    """``traffic.sessions`` of the pooled records, its sessions and turns per session counted by
    (repeat, session id): every repeat's schedule reuses the ids, and repeat 2's session 0 is
    another conversation than repeat 1's."""
    table = p.table
    block = traffic.sessions(table)
    if block is None:
        return None
    measured = ~table.column("warmup") & table.present("session_id")
    repeat = np.repeat(np.arange(len(p.lengths)), p.lengths)
    keys = np.stack([repeat[measured], table.ints("session_id")[0][measured]])
    turns = np.unique(keys, axis=1, return_counts=True)[1] if keys.shape[1] else np.zeros(0, np.int64)
    block["sessions"] = int(turns.size)
    block["turns_per_session"] = cast(Distribution, metrics.distribution(turns)) if turns.size else None
    return block


def _models(p: PooledRun, _built: Built) -> Models | None:
    mix = p.profile.workload.models
    return None if mix is None else models_block(p.table, mix.names, mix.choice, p.seconds, p.sla)


def _media(p: PooledRun, _built: Built) -> Media | None:
    return media_block(p.table, p.seconds)


def _fidelity(p: PooledRun, _built: Built) -> Fidelity | None:
    truths = [(r.run_dir.name, r.summary.get("fidelity")) for r in p.ran]
    return rp.pool_fidelity(truths) if any(b is not None for _n, b in truths) else None


def _server(p: PooledRun, _built: Built) -> ServerView | None:
    if not any("server" in r.summary for r in p.ran):
        return None
    views = [(r.run_dir.name, r.summary.get("server") or {"available": False}) for r in p.ran]
    return rp.pool_server(views, client_means.client_means(p.table))


# In blocks.BLOCKS' order: a later pooling may read an earlier block (the curve reads the stages).
POOLED: tuple[tuple[str, Pooler], ...] = (
    ("stages", _stages),
    ("curve", _curve),
    ("quality", _quality),
    ("sessions", _sessions),
    ("models", _models),
    ("media", _media),
    ("http_phases", lambda p, _built: http_phases(p.table)),  # the pooled records' phases
    ("fidelity", _fidelity),
    ("server", _server),
)
# The blocks the parent does not pool, and why; each repeat's own summary.json has them.
NOT_POOLED: dict[str, str] = {
    "capacity": "a repeated capacity search pools its searches itself (runner/capacity_repeats.py)",
    "precision": "each repeat stopped on its own precision (load.until); the pool has no stop of its own",
    "speculative": "the acceptance counters are per server process; not pooled yet",
    "telemetry": "the GPUs' readings are per repeat's window; not pooled yet",
    "agentic": "a session id names one repeat's session; each repeat's block is its own, not pooled yet",
    "replicas": "each repeat's replicas block is its own; pooling across repeats is not built yet",
}


def pool(p: PooledRun) -> dict[str, object]:
    """Every block the repeats pool into, in ``POOLED``'s order."""
    built: dict[str, object] = {}
    for name, make in POOLED:
        value = make(p, built)
        if value is not None:
            built[name] = value
    return built
