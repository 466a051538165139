"""What ``compare`` does differently when some of its paths are result files of other tools
(``loadgen.analysis.peer_results``): how each path is read, the conditions diffed, the
warnings. Kept apart so ``compare`` reads the same with or without them.

The condition diff with a peer result (the rule): a tool's file states a few conditions (the
model, the load, the lengths it realised) and is silent on the rest; silence is not a
difference. So a field is listed when the runs that record it disagree: every loadgen run
counts (a field it lacks is ``ABSENT``, as between loadgen runs), a peer result only where its
file states the field (elsewhere its cell reads ``NOT_RECORDED``). The same holds inside a
realised length: a file that gives only its mean is compared on the mean, so mean 64 against
mean 64 (with loadgen's percentiles beside) is no difference (``same_stats``). The first row,
``source``, says where each run's numbers came from: loadgen, or which tool's results file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis.condition_diff import ABSENT, ConditionDiff, condition_diff, flatten_conditions
from loadgen.analysis.peer_results import TOOLS, UNRECORDED, PeerResult, read_peer_result
from loadgen.analysis.runs import SUMMARY, load_summary
from loadgen.errors import ResultError
from loadgen.summary import Summary

NOT_RECORDED = f"({UNRECORDED})"
SOURCE_FIELD = "source"
# A whole-file percentile cell of a peer file of several load points: not pooled, per stage.
PER_STAGE = "per stage"
LOADGEN_SOURCE = "loadgen"


@dataclass(frozen=True)
class Source:
    """One path of a comparison as read: its summary, the folder (or peer file) it names, the
    name it starts from, and the peer result when it is another tool's file."""

    summary: Summary
    path: Path
    name: str
    peer: PeerResult | None


def read_source(path: str | Path) -> Source:
    """A loadgen run (its folder or summary.json) or another tool's result file; anything else
    is a ``ResultError`` naming the path and what it could have been."""
    p = Path(path)
    peer = read_peer_result(p)
    if peer is not None:
        return Source(peer.summary, peer.path, peer.name, peer)
    if p.is_file() and p.name != SUMMARY:
        raise ResultError(
            f"{p}: neither a loadgen run (its folder or {SUMMARY}) nor a result file of " + ", ".join(TOOLS)
        )
    summary = load_summary(p)
    folder = p.parent if p.is_file() else p
    return Source(summary, folder, summary.get("run_id") or folder.name, None)


def conditions_diff(
    conditions: Sequence[Mapping[str, Any]], peers: Sequence[PeerResult | None]
) -> list[ConditionDiff]:
    """``condition_diff`` of the runs, or with any peer result the module's rule."""
    if not any(peers):
        return condition_diff(conditions)
    flat = [flatten_conditions(c) for c in conditions]
    out = [ConditionDiff(SOURCE_FIELD, tuple(p.source if p else LOADGEN_SOURCE for p in peers))]
    for field in sorted(set().union(*flat)):
        values = tuple(d.get(field, NOT_RECORDED if p else ABSENT) for d, p in zip(flat, peers))
        recorded = [v for v, d, p in zip(values, flat, peers) if p is None or field in d]
        if not same_stats(recorded):
            out.append(ConditionDiff(field, values))
    return out


def same_stats(values: Sequence[Any]) -> bool:
    """Whether the recorded values of one field agree. Distributions (dicts of stats) agree on
    the stats they all have: a statistic one side lacks is unknown, not different; a value and
    a distribution, or two values, agree only when equal."""
    if all(isinstance(v, Mapping) for v in values):
        shared = set.intersection(*({k for k, x in v.items() if x is not None} for v in values))
        return all(v[k] == values[0][k] for v in values[1:] for k in shared)
    return all(v == values[0] for v in values[1:])


def peer_warnings(names: Sequence[str], peers: Sequence[PeerResult | None]) -> list[str]:
    """One warning per peer result: whose numbers they are, and what compare cannot show of
    them; for a file of several load points, that its percentiles are per stage."""
    out = []
    for name, p in zip(names, peers):
        if p is None:
            continue
        out.append(
            f"{name}: a results file of {p.tool}, not a loadgen run: its figures follow {p.tool}'s "
            "definitions (see 'Definitions that differ'); it has no per-request records, so no CDF "
            "and no output agreement"
        )
        if p.points > 1:
            stages = ", ".join(s["name"] for s in p.summary.get("stages") or ())
            pooled_by_tool = any(
                isinstance(m, Mapping) and m.get("p50") is not None for m in p.summary["metrics"].values()
            )
            out.append(
                f"{name}: {p.points} load points ({stages}), each compared as a stage (the curves); "
                + (
                    f"its whole-file rows are {p.tool}'s own figures over every point's requests together"
                    if pooled_by_tool
                    else "percentiles measured at different loads do not pool, so its whole-file "
                    f"percentile rows read '{PER_STAGE}'; its counts, rates and means are over all of them"
                )
            )
    return out


def definitions(names: Sequence[str], peers: Sequence[PeerResult | None]) -> dict[str, dict[str, Any]]:
    """compare.json's ``peer_results``: per peer result its tool, file and definitions."""
    return {
        name: {
            "tool": p.tool,
            "version": p.version or UNRECORDED,
            "run_id": p.summary.get("run_id"),
            "path": str(p.path),
            "load_points": p.points,
            "definitions": list(p.definitions),
        }
        for name, p in zip(names, peers)
        if p is not None
    }
