"""A repeated run (``load.repeats``, ``--repeats N``): the same load N times, one run folder.

    reports/<run-id>/
        repeat-1/ ... repeat-N/   each a complete run folder (summary.json, requests.jsonl, its
                                  simulator's ground truth, report): report and gate take one
        requests.jsonl            every repeat's records, repeat after repeat
        summary.json              a summary like any run's, pooled over the repeats, plus the
                                  ``repeats`` block: each repeat's headline figures and their
                                  between-repeat interval (``analysis.repeats``)

Each repeat is a run of its own through ``run_one`` (``api``'s single run): the same profile and
seed, so the same schedule, prompts and lengths; its own transport (fresh connections), its own
simulator when no URL is given, and the server's reset hook first when one is set. What differs
between repeats is the server's noise, which is what the interval measures.

The parent's numbers come from the records, not the repeats' summaries (pooled latencies are
the samples of all repeats; rates are per second of the repeats' windows summed, the gaps
between repeats excluded), and its conditions are the first repeat's (already scrubbed) with
the repeat count. Only the ``repeats`` block reads the repeats' summaries: a repeat's figure
is its own summary's, by definition.
"""

from __future__ import annotations

import asyncio
import copy
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loadgen import metric_defs
from loadgen.analysis import metrics
from loadgen.analysis import repeats as rp
from loadgen.analysis.table import RecordTable
from loadgen.backends import registry
from loadgen.config import Profile
from loadgen.errors import RunError
from loadgen.result import REQUESTS, SCHEMA_VERSION, RunResult, load_summary, write_summary
from loadgen.runner.prepare import make_run_dir
from loadgen.summary import ClientHealth, EndedBy, RepeatFigure, Repeats, Summary

REPEAT_DIR = "repeat-{}"
METHOD = (
    "each figure's mean over the repeats with a {confidence:.0%} Student t interval, "
    "mean ± t(n-1)·sd/√n: the repeats are the independent units (the per-request bootstrap sees "
    "only the noise within one run)"
)

RunOne = Callable[[Profile], Awaitable[RunResult]]


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
    figures: Callable[[Summary], list[tuple[str, str | None, float | None]]] | None = None,
    sla: Any = None,
    seed_step: int = 0,
) -> RunResult:
    """Run ``profile``'s load ``load.repeats`` times through ``run_one``, each into its own
    folder of one new run folder, then pool them into its summary.json. A stop (Ctrl-C) ends
    the current repeat as it ends a run and sends no further one; the pooled summary then says
    the run is incomplete. ``figures`` (default: the headline's) picks a repeat's figures; ``sla``
    (default: the profile's) is the SLA section the pooled requests are judged by; ``seed_step``
    moves each repeat's workload seed (see ``repeat_profile``)."""
    parent = make_run_dir(profile)
    n = profile.load.repeats
    done: list[RunResult] = []
    for k in range(1, n + 1):
        status(f"repeat {k} of {n}")
        done.append(await run_one(repeat_profile(profile, parent, k, seed_step)))
        if (stop is not None and stop.is_set()) or not done[-1].summary.get("complete", True):
            break
    summary = pooled_summary(parent, profile, done, figures or headline_figures, sla)
    return RunResult(parent, summary)


def headline_figures(summary: Summary) -> list[tuple[str, str | None, float | None]]:
    """(metric, stat, value) of each headline figure (``analysis.repeats.HEADLINE``) the run
    has (the metrics of its protocol: ``metric_defs.present``)."""
    return [
        (m, s, metric_defs.lookup(summary, m, s)) for m, s in rp.HEADLINE if metric_defs.present(summary, m)
    ]


def pooled_summary(
    parent: Path,
    profile: Profile,
    done: list[RunResult],
    figures: Callable[[Summary], list[tuple[str, str | None, float | None]]],
    sla: Any = None,
) -> Summary:
    """The parent's summary.json: every repeat's records pooled, the first repeat's conditions,
    and the ``repeats`` block; written to ``parent``."""
    _pool_records(parent, done)
    first, last = done[0].summary, done[-1].summary
    count = profile.load.repeats
    complete = len(done) == count and all(r.summary.get("complete", True) for r in done)
    reason = None if complete else _incomplete(count, done)
    seconds = sum(float(r.summary["window"]["seconds"]) for r in done)
    table = RecordTable.from_file(parent / REQUESTS)
    sla = profile.sla if sla is None else sla
    streamed = registry.backend(profile.target.endpoint).streamed
    measured = metrics.summarize(table, sla=sla, incomplete=not complete, seconds=seconds, streamed=streamed)
    summary: Summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": parent.name,
        "started_at": first["started_at"],
        "ended_at": last["ended_at"],
        "interrupted": any(r.summary["interrupted"] for r in done),
        "complete": complete,
        "incomplete_reason": reason,
        "conditions": _conditions(first, parent, count),
        "counts": measured["counts"],
        "window": measured["window"],
        "metrics": measured["metrics"],
        "sla": measured["sla"],
        "ended_by": _ended_by(first, len(done), count, reason),
        "client": _client(done),
        "repeats": repeats_block(count, done, figures),
    }
    write_summary(parent, summary)
    return summary


def repeats_block(
    count: int,
    done: list[RunResult],
    figures: Callable[[Summary], list[tuple[str, str | None, float | None]]],
    confidence: float = rp.CONFIDENCE,
) -> Repeats:
    """Each repeat's folder and its figures, and each figure over the repeats (``t_interval``)."""
    rows = [figures(r.summary) for r in done]
    out: list[RepeatFigure] = []
    for i, (metric, stat, _v) in enumerate(rows[0]):
        values = [row[i][2] for row in rows]
        iv = rp.t_interval(values, confidence)
        out.append(
            {
                "figure": rp.figure_name(metric, stat),
                "metric": metric,
                "stat": stat,
                "values": [None if v is None else float(v) for v in values],
                "n": iv.n,
                "mean": iv.mean,
                "sd": iv.sd,
                "low": iv.low,
                "high": iv.high,
            }
        )
    return {
        "count": count,
        "completed": sum(bool(r.summary.get("complete", True)) for r in done),
        "confidence": confidence,
        "method": METHOD.format(confidence=confidence),
        "runs": [
            {"index": k, "path": r.run_dir.name, "complete": bool(r.summary.get("complete", True))}
            for k, r in enumerate(done, 1)
        ],
        "figures": out,
    }


def load_repeat(parent: Path, path: str) -> Summary:
    """The summary of the repeat in ``parent / path``."""
    return load_summary(parent / path)


def _pool_records(parent: Path, done: list[RunResult]) -> None:
    """The repeats' requests.jsonl, one after another, as the parent's (bytes as written)."""
    try:
        with open(parent / REQUESTS, "wb") as out:
            for r in done:
                with open(r.run_dir / REQUESTS, "rb") as src:
                    shutil.copyfileobj(src, out)
    except OSError as exc:
        raise RunError(f"cannot pool the repeats' records into {parent / REQUESTS}: {exc}") from None


def _conditions(first: Summary, parent: Path, count: int) -> Any:
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


def _client(done: list[RunResult]) -> ClientHealth:
    """The first repeat's client health, with every repeat's warnings, each saying its repeat."""
    client: Any = copy.deepcopy(done[0].summary["client"])
    client["warnings"] = [
        {**w, "message": f"{r.run_dir.name}: {w['message']}"}
        for r in done
        for w in r.summary["client"].get("warnings", [])
    ]
    client["client_limited"] = any(r.summary["client"].get("client_limited") for r in done)
    return client


def _ended_by(first: Summary, ran: int, count: int, reason: str | None) -> EndedBy:
    """All repeats ran, each ended as the first did; or why the repeated run stopped early."""
    if reason is not None:
        return {"limit": "stopped", "text": f"stopped early: {reason}"}
    each = first["ended_by"]["text"] if "ended_by" in first else "its limits"
    return {"limit": "repeats", "text": f"{ran} of {count} repeats ran, each to {each}"}


def _incomplete(count: int, done: list[RunResult]) -> str:
    last = done[-1].summary
    why = last.get("incomplete_reason") or "stopped"
    return f"{len(done)} of {count} repeats ran; {done[-1].run_dir.name}: {why}"
