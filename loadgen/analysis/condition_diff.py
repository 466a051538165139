"""The conditions two or more saved runs differ in: what ``compare`` lists and ``gate`` checks.

The diff flattens ``conditions`` to dotted paths (``lengths.requested.output_tokens.value``)
and lists every path whose value is not the same in all runs, with three exceptions, all on
purpose and all listed here:

- ``IGNORED_CONDITIONS``: the run's own name and where its files went. They differ between
  any two runs and say nothing about what was measured. Everything else is kept, including
  ``target.url`` (a different host or port is a different server until shown otherwise) and
  ``client.git_commit`` (a different client build, dirty flag included).
- ``SHADOWED``: ``profile.*`` fields that ``conditions`` also reports under an effective name
  (``profile.load`` is ``load``, ``profile.target.model`` (requested, often null) is
  ``target.model`` (what was driven)); each difference is listed once, under that name.
- A realised length distribution (``lengths.realised.*``, a dict of count/mean/p50/...) is one
  field, compared without its ``count`` (the number of requests, which is listed on its own as
  ``profile.workload.num_requests``); an empty mapping is the same as an absent one.
- A null is the same as an absent field: a profile field a newer loadgen added (at its default,
  null) does not make its runs differ from an older loadgen's, which never wrote it.

Pure: ``conditions`` blocks in, the fields that differ out.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.config.stages import recorded_load

IGNORED_CONDITIONS: tuple[str, ...] = ("profile.name", "profile.output.*")
SHADOWED: dict[str, str] = {
    "profile.target.url": "target.url",
    "profile.target.endpoint": "target.endpoint",
    "profile.target.model": "target.model",
    "profile.target.transport": "target.transport",
    "profile.workload.seed": "seed",
    "profile.load": "load",
    "profile.labels": "labels",
    "profile.workload.input_tokens": "lengths.requested.input_tokens",
    "profile.workload.output_tokens": "lengths.requested.output_tokens",
}
# A difference under these makes the runs' latencies not like-for-like: warned about at the top.
WORKLOAD_FIELDS: tuple[str, ...] = ("profile.workload.*", "lengths.*", "load.*", "seed")
ABSENT = "(absent)"


@dataclass(frozen=True)
class ConditionDiff:
    """One condition field and its value in each run (``ABSENT`` where a run lacks it)."""

    field: str
    values: tuple[Any, ...]


def matches(path: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, p) or path == p.removesuffix(".*") for p in patterns)


def flatten_conditions(conditions: Mapping[str, Any]) -> dict[str, Any]:
    """``conditions`` as {dotted path: leaf value}, ignored and shadowed fields left out; the
    load read as it ran (``recorded_load``), so an earlier loadgen's conditions, which recorded
    the settings' defaults (a closed loop's ``arrival: poisson``), compare with today's."""
    out: dict[str, Any] = {}
    if isinstance(conditions.get("load"), dict):
        trace = (conditions.get("traffic") or {}).get("source") == "trace"
        conditions = {**conditions, "load": recorded_load(conditions["load"], trace)}

    def walk(node: Any, path: str) -> None:
        if matches(path, IGNORED_CONDITIONS) or path in SHADOWED:
            return
        if isinstance(node, dict) and {"count", "mean"} <= node.keys():
            out[path] = {k: v for k, v in node.items() if k != "count"}
        elif isinstance(node, dict):
            for key, child in node.items():
                walk(child, f"{path}.{key}" if path else str(key))
        else:
            out[path] = node

    walk(conditions, "")
    return out


def condition_diff(conditions: Sequence[Mapping[str, Any]]) -> list[ConditionDiff]:
    """Every field (dotted path, sorted) whose value is not the same in all ``conditions``."""
    flat = [flatten_conditions(c) for c in conditions]
    fields = sorted(set().union(*flat))
    out = []
    for f in fields:
        values = tuple(d.get(f, ABSENT) for d in flat)
        same = [ABSENT if v is None else v for v in values]
        if any(v != same[0] for v in same[1:]):
            out.append(ConditionDiff(f, values))
    return out


def workload_differences(diff: Sequence[ConditionDiff]) -> list[str]:
    return [d.field for d in diff if matches(d.field, WORKLOAD_FIELDS)]
