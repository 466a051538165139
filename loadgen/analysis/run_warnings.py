"""What a reader must know before trusting a comparison of runs: one list, which ``compare``
and ``gate`` both print, so a gate never passes silently on runs that compare would warn about.

Each warning is one sentence: the runs' workloads differ (their latencies are not like-for-like),
they drove a different model or endpoint, or a run's own figures are suspect: the client
limited it, its measurement failed the simulator's ground-truth check (with the machine's
business as the cause when the client block names it), or it was interrupted. A run's failed
requests are said apart (``sla.run_failures``): the figures are of its ok requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis.condition_diff import ConditionDiff, workload_differences


def run_warnings(
    names: Sequence[str], summaries: Sequence[Mapping[str, Any]], diff: Sequence[ConditionDiff]
) -> list[str]:
    """The warnings about ``summaries`` (named ``names``) and the condition fields they differ in."""
    out = []
    workload = workload_differences(diff)
    if workload:
        out.append(
            "the runs' workloads differ (" + ", ".join(workload) + "): their latencies and "
            "throughputs are not like-for-like"
        )
    for field in ("target.model", "target.endpoint"):
        if any(d.field == field for d in diff):
            out.append(f"the runs drove a different {field.split('.')[1]} ({field})")
    for name, s in zip(names, summaries):
        client = s.get("client") or {}
        if client.get("client_limited"):
            out.append(
                f"{name}: the client limited this run (client.client_limited): its "
                "latencies include client delay"
            )
        if (s.get("fidelity") or {}).get("verdict") == "fail":
            busy = client.get("busy_machine")
            out.append(
                f"{name}: its measurement failed the simulator's ground-truth check (fidelity.verdict): "
                "its latencies carry the client's own error" + (f"; {busy}" if busy else "")
            )
        if s.get("interrupted"):
            out.append(f"{name}: the run was interrupted before it finished")
    return out
