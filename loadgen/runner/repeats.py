"""A repeated run (``load.repeats``, ``--repeats N``): the same load N times, one run folder.

    reports/<run-id>/
        repeat-1/ ... repeat-N/   each a complete run folder (summary.json, requests.jsonl, its
                                  simulator's ground truth, report): report and gate take one
        requests.jsonl            every pooled repeat's records, repeat after repeat
        summary.json              a summary like any run's, pooled over the repeats, plus the
                                  ``repeats`` block: each repeat's headline figures and their
                                  between-repeat interval (``analysis.repeats``)

Each repeat is a run of its own through ``run_one`` (``api``'s single run): the same profile and
seed, so the same schedule, prompts and lengths; its own transport (fresh connections), its own
simulator when no URL is given, and the server's reset hook first when one is set. What differs
between repeats is the server's noise, which is what the interval measures. A staged run
(``load.stages``, ``load.sweep``) repeats whole: every repeat runs every stage, and stage i of
the parent pools stage i of each repeat (the same load level), so its ``stages`` and ``curve``
are a sweep's and the ``repeats`` block adds each stage's figures.

A repeat that raises (the server died or refused the preflight) is kept in the ``repeats``
block as failed, with its error scrubbed, and left out of the pool; the next repeats still run,
and the parent is incomplete, its reason naming that repeat (``loadgen run`` exits non-zero).

How each block pools. From the pooled records, as a run's: counts, window, metrics, sla,
quality, models, media, each stage's counts, window, metrics and sla (rates per second of the
repeats' windows summed, the gaps between repeats excluded), and sessions (a session id names a
conversation of one repeat). From the repeats' own blocks (``analysis.repeats``), where the
records cannot say it: fidelity (each repeat met its own simulator's log), server (counter deltas
over each repeat's scrapes), a stage's saturation and steady state (trends within a repeat).
Conditions are the first repeat's (already scrubbed) with the repeat count. Which blocks are
pooled, in what order, and why the others are not: ``repeats_blocks.py``.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

from loadgen import metric_defs
from loadgen.analysis import metrics
from loadgen.analysis import repeats as rp
from loadgen.analysis.record_store import STORE, compact, concat_stores, read_store
from loadgen.analysis.table import RecordTable
from loadgen.backends import registry
from loadgen.config import Profile
from loadgen.errors import LoadgenError, RunError
from loadgen.result import REQUESTS, SCHEMA_VERSION, RunResult, load_summary, write_summary
from loadgen.runner import repeats_blocks
from loadgen.runner.prepare import make_run_dir, target_for
from loadgen.runner.repeats_blocks import PooledRun
from loadgen.summary import (
    ClientHealth,
    Conditions,
    EndedBy,
    RepeatFigure,
    RepeatRun,
    Repeats,
    Summary,
)

REPEAT_DIR = "repeat-{}"
METHOD = (
    "each figure's mean over the repeats with a {confidence:.0%} Student t interval, "
    "mean ± t(n-1)·sd/√n: the repeats are the independent units (the per-request bootstrap sees "
    "only the noise within one run)"
)

RunOne = Callable[[Profile], Awaitable[RunResult]]
Figures = Callable[[Summary], list[tuple[str, str | None, float | None]]]


@dataclasses.dataclass(frozen=True, slots=True)
class RepeatFailed:
    """A repeat that raised instead of finishing: its folder and its error, scrubbed."""

    run_dir: Path
    error: str


Outcome = RunResult | RepeatFailed


def repeat_profile(profile: Profile, parent: Path, index: int, seed_step: int = 0) -> Profile:
    """Repeat ``index`` (from 1) of ``profile``: one plain run in ``parent/repeat-<index>``, its
    workload seed moved by ``seed_step`` per repeat (0: every repeat the same schedule)."""
    seed = profile.workload.seed + seed_step * (index - 1)
    return profile.model_copy(
        update={
            "load": profile.load.model_copy(update={"repeats": 1}),
            "workload": profile.workload.model_copy(update={"seed": seed}),
            "output": profile.output.model_copy(
                update={"dir": str(parent), "run_id": REPEAT_DIR.format(index)}
            ),
        }
    )


async def run_repeated(
    profile: Profile,
    run_one: RunOne,
    *,
    stop: asyncio.Event | None = None,
    status: Callable[[str], None] = lambda _m: None,
    figures: Figures | None = None,
    sla: Any = None,
    seed_step: int = 0,
    scrub: Callable[[str], str] | None = None,
) -> RunResult:
    """Run ``profile``'s load ``load.repeats`` times through ``run_one``, each into its own
    folder of one new run folder, then pool them into its summary.json. A stop (Ctrl-C) ends
    the current repeat as it ends a run and sends no further one; the pooled summary then says
    the run is incomplete. A repeat that raises is marked failed and the next one runs.
    ``figures`` (default: the headline's) picks a repeat's figures; ``sla`` (default: the
    profile's) is the SLA section the pooled requests are judged by; ``seed_step`` moves each
    repeat's workload seed (see ``repeat_profile``); ``scrub`` (default: the profile's secrets)
    cleans a failed repeat's error before it is stored."""
    parent = make_run_dir(profile)
    if scrub is None:
        scrub = target_for(profile, profile.target.url or "http://127.0.0.1", None, None).scrubber.scrub
    n = profile.load.repeats
    done: list[Outcome] = []
    for k in range(1, n + 1):
        status(f"repeat {k} of {n}")
        try:
            done.append(await run_one(repeat_profile(profile, parent, k, seed_step)))
        except Exception as exc:  # noqa: BLE001 - one repeat's error must not lose the others
            said = str(exc) if isinstance(exc, LoadgenError) else f"{type(exc).__name__}: {exc}"
            done.append(RepeatFailed(parent / REPEAT_DIR.format(k), scrub(said)))
            status(f"repeat {k} of {n} failed: {scrub(said)}")
        stopped = isinstance(done[-1], RunResult) and not _complete(done[-1])
        if stopped or (stop is not None and stop.is_set()):
            break
    summary = pooled_summary(parent, profile, done, figures or headline_figures, sla)
    return RunResult(parent, summary)


def headline_figures(summary: Summary) -> list[tuple[str, str | None, float | None]]:
    """(metric, stat, value) of each headline figure (``analysis.repeats.HEADLINE``) the run
    (or a stage of it) has (the metrics of its protocol: ``metric_defs.present``)."""
    return [
        (m, s, metric_defs.lookup(summary, m, s)) for m, s in rp.HEADLINE if metric_defs.present(summary, m)
    ]


def pooled_summary(
    parent: Path, profile: Profile, done: Sequence[Outcome], figures: Figures, sla: Any = None
) -> Summary:
    """The parent's summary.json: the finished repeats' records pooled, the first one's
    conditions, the blocks pooled as the module's docstring says, and the ``repeats`` block;
    written to ``parent``. RunError when no repeat finished: there is nothing to pool."""
    ran = [o for o in done if isinstance(o, RunResult)]
    if not ran:
        said = "; ".join(f"{o.run_dir.name}: {o.error}" for o in done if isinstance(o, RepeatFailed))
        raise RunError(f"every repeat failed, so {parent} has nothing to pool: {said}")
    table, lengths = _pool_records(parent, ran)
    first, last = ran[0].summary, ran[-1].summary
    count = profile.load.repeats
    reason = _incomplete(count, done)
    seconds = sum(float(r.summary["window"]["seconds"]) for r in ran)
    sla = profile.sla if sla is None else sla
    streamed = registry.backend(profile.target.endpoint).streamed
    measured = metrics.summarize(
        table, sla=sla, incomplete=reason is not None, seconds=seconds, streamed=streamed
    )
    summary: Summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": parent.name,
        "started_at": first["started_at"],
        "ended_at": last["ended_at"],
        "interrupted": any(r.summary["interrupted"] for r in ran),
        "complete": reason is None,
        "incomplete_reason": reason,
        "conditions": _conditions(first, parent, count),
        "counts": measured["counts"],
        "window": measured["window"],
        "metrics": measured["metrics"],
        "sla": measured["sla"],
        "ended_by": _ended_by(first, len(done), count, reason),
        "client": _client(ran),
    }
    pooled = PooledRun(profile, ran, table, lengths, sla, seconds, streamed)
    summary.update(cast(Summary, repeats_blocks.pool(pooled)))
    summary["repeats"] = repeats_block(count, done, figures)
    if "stages" in summary:
        cast(dict, summary["repeats"])["stages"] = _stage_figures(done, rp.CONFIDENCE)
    write_summary(parent, summary)
    return summary


def repeats_block(
    count: int, done: Sequence[Outcome], figures: Figures, confidence: float = rp.CONFIDENCE
) -> Repeats:
    """Each repeat's folder (a failed one with its error) and its figures, and each figure over
    the repeats (``t_interval``; a failed repeat has no value)."""
    return {
        "count": count,
        "completed": sum(_complete(o) for o in done),
        "confidence": confidence,
        "method": METHOD.format(confidence=confidence),
        "runs": [_run_entry(k, o) for k, o in enumerate(done, 1)],
        "figures": _over(
            [figures(o.summary) if isinstance(o, RunResult) else None for o in done], confidence
        ),
    }


def load_repeat(parent: Path, path: str) -> Summary:
    """The summary of the repeat in ``parent / path``."""
    return load_summary(parent / path)


def _over(
    rows: Sequence[list[tuple[str, str | None, float | None]] | None], confidence: float
) -> list[RepeatFigure]:
    """Each figure the first finished repeat has, over every repeat (None where one has no
    value: it failed, or lacks the figure)."""
    names = next((row for row in rows if row is not None), [])
    by_repeat = [{(m, s): v for m, s, v in row or []} for row in rows]
    out: list[RepeatFigure] = []
    for metric, stat, _v in names:
        values = [None if (v := each.get((metric, stat))) is None else float(v) for each in by_repeat]
        iv = rp.t_interval(values, confidence)
        fig = {"figure": rp.figure_name(metric, stat), "metric": metric, "stat": stat, "values": values}
        out.append(cast(RepeatFigure, {**fig, **dataclasses.asdict(iv)}))
    return out


def _stage_figures(done: Sequence[Outcome], confidence: float) -> list[dict[str, Any]]:
    """Per stage (index and name), its headline figures over the repeats, as ``figures``."""
    per = [o.summary.get("stages") or [] if isinstance(o, RunResult) else [] for o in done]
    longest = max(per, key=len)
    return [
        {
            "index": stage["index"],
            "name": stage["name"],
            "figures": _over(
                [headline_figures(cast(Summary, s[i])) if len(s) > i else None for s in per], confidence
            ),
        }
        for i, stage in enumerate(longest)
    ]


def _pool_records(parent: Path, ran: Sequence[RunResult]) -> tuple[RecordTable, list[int]]:
    """The repeats' records, one after another, as the parent's: their requests.jsonl (bytes as
    written, a torn last line ended so it cannot swallow the next repeat's first), or their
    record stores when they kept them (a repeat killed before it compacted is compacted now);
    and their table with each repeat's row count."""
    if any((r.run_dir / STORE).exists() for r in ran):
        return _pool_stores(parent, ran)
    try:
        with open(parent / REQUESTS, "wb") as out:
            for r in ran:
                data = (r.run_dir / REQUESTS).read_bytes()
                out.write(data if not data or data.endswith(b"\n") else data + b"\n")
    except OSError as exc:
        raise RunError(f"cannot pool the repeats' records into {parent / REQUESTS}: {exc}") from None
    tables = [RecordTable.from_file(r.run_dir / REQUESTS) for r in ran]
    return RecordTable.concat(tables), [len(t) for t in tables]


def _pool_stores(parent: Path, ran: Sequence[RunResult]) -> tuple[RecordTable, list[int]]:
    stores = [r.run_dir / STORE for r in ran]
    try:
        for r, store in zip(ran, stores):
            if not store.exists():
                compact(r.run_dir / REQUESTS, store)
        concat_stores(stores, parent / STORE)
    except OSError as exc:
        raise RunError(f"cannot pool the repeats' records into {parent / STORE}: {exc}") from None
    tables = [read_store(s) for s in stores]
    return RecordTable.concat(tables), [len(t) for t in tables]


def _conditions(first: Summary, parent: Path, count: int) -> Conditions:
    """The first repeat's conditions (its secrets scrubbed already), saying the repeat count
    and the parent's folder."""
    cond: Any = copy.deepcopy(first["conditions"])
    for load in (cond.get("load"), (cond.get("profile") or {}).get("load")):
        if isinstance(load, dict):
            load["repeats"] = count
    output = (cond.get("profile") or {}).get("output")
    if isinstance(output, dict):
        output.update(dir=str(parent.parent), run_id=parent.name)
    return cond


def _client(ran: Sequence[RunResult]) -> ClientHealth:
    """The first repeat's client health, with every repeat's warnings, each saying its repeat."""
    client: Any = copy.deepcopy(ran[0].summary["client"])
    client["warnings"] = [
        {**w, "message": f"{r.run_dir.name}: {w['message']}"}
        for r in ran
        for w in r.summary["client"].get("warnings", [])
    ]
    client["client_limited"] = any(r.summary["client"].get("client_limited") for r in ran)
    return client


def _ended_by(first: Summary, ran: int, count: int, reason: str | None) -> EndedBy:
    """All repeats ran, each ended as the first did; or why the repeated run stopped early."""
    if reason is not None:
        return {"limit": "stopped", "text": f"stopped early: {reason}"}
    each = first["ended_by"]["text"] if "ended_by" in first else "its limits"
    return {"limit": "repeats", "text": f"{ran} of {count} repeats ran, each to {each}"}


def _incomplete(count: int, done: Sequence[Outcome]) -> str | None:
    """Why the repeated run is incomplete (its failed repeats, the repeat that was stopped, or a
    stop between repeats), or None when every repeat ran to its limits."""
    why = [f"{o.run_dir.name} failed: {o.error}" for o in done if isinstance(o, RepeatFailed)]
    last = done[-1]
    if isinstance(last, RunResult) and not _complete(last):
        why.append(f"{last.run_dir.name}: {last.summary.get('incomplete_reason') or 'stopped'}")
    elif len(done) < count and isinstance(last, RunResult):
        why.append(f"stopped after {last.run_dir.name}")
    if not why:
        return None
    pooled = sum(isinstance(o, RunResult) for o in done)
    return f"{len(done)} of {count} repeats ran, {pooled} pooled; " + "; ".join(why)


def _complete(o: Outcome) -> bool:
    return isinstance(o, RunResult) and bool(o.summary.get("complete", True))


def _run_entry(index: int, o: Outcome) -> RepeatRun:
    entry: dict[str, Any] = {"index": index, "path": o.run_dir.name, "complete": _complete(o)}
    if isinstance(o, RepeatFailed):
        entry["error"] = o.error
    return cast(RepeatRun, entry)
