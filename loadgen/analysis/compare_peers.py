"""What ``compare`` does differently when some of its paths are result files of other tools
(``loadgen.analysis.peer_results``): how each path is read, the conditions diffed, the
warnings. Kept apart so ``compare`` reads the same with or without them.

The condition diff with a peer result (the rule): a tool's file states a few conditions (the
model, the load, the lengths it realised) and is silent on the rest; silence is not a
difference. So a field is listed when the runs that record it disagree: every loadgen run
counts (a field it lacks is ``ABSENT``, as between loadgen runs), a peer result only where its
file states the field (elsewhere its cell reads ``NOT_RECORDED``). The first row, ``source``,
says where each run's numbers came from: loadgen, or which tool's results file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis.condition_diff import ABSENT, ConditionDiff, condition_diff, flatten_conditions
from loadgen.analysis.peer_results import TOOLS, PeerResult, read_peer_result
from loadgen.analysis.runs import SUMMARY, load_summary
from loadgen.errors import ResultError
from loadgen.summary import Summary

NOT_RECORDED = "(not recorded)"
SOURCE_FIELD = "source"
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
        if any(v != recorded[0] for v in recorded[1:]):
            out.append(ConditionDiff(field, values))
    return out


def peer_warnings(names: Sequence[str], peers: Sequence[PeerResult | None]) -> list[str]:
    """One warning per peer result: whose numbers they are, and what compare cannot show of them."""
    return [
        f"{name}: a results file of {p.tool}, not a loadgen run: its figures follow {p.tool}'s "
        "definitions (see 'Definitions that differ'); it has no per-request records, so no CDF "
        "and no output agreement"
        for name, p in zip(names, peers)
        if p is not None
    ]


def definitions(names: Sequence[str], peers: Sequence[PeerResult | None]) -> dict[str, dict[str, Any]]:
    """compare.json's ``peer_results``: per peer result its tool, file and definitions."""
    return {
        name: {"tool": p.tool, "version": p.version, "path": str(p.path), "definitions": list(p.definitions)}
        for name, p in zip(names, peers)
        if p is not None
    }
