"""Compare's per-replica rows: for runs over several replica URLs (``summary.replicas``), each
replica's share of the requests, its failures, its output tokens per second and its latencies'
p99, one row each beside the pooled rows, so two fleets (a new GPU in one slot, another
balancing policy) are read replica by replica and not only as their pool.

Replicas are matched by their index in ``target.urls``: the URLs of two runs may differ (another
host, other credentials) while the slot is the same. A run without the block, or with fewer
replicas, has an empty cell there, never a number from another row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.summary import Summary

PREFIX = "replica."
# a row's figure in the block's replica row: ``{name}`` or ``{latency} p99`` / ``p50``
SCALARS: tuple[str, ...] = ("share", "failed", "output_tokens_per_s")
LATENCIES: tuple[str, ...] = ("ttft_ms", "tpot_ms", "e2e_ms")
STATS: tuple[str, ...] = ("p50", "p99")


def _rows_of(summary: Summary) -> Sequence[Mapping[str, Any]]:
    block: Mapping[str, Any] = summary.get("replicas") or {}
    return block.get("by_replica") or ()


def replica_rows(summaries: Sequence[Summary]) -> tuple[str, ...]:
    """The table's rows for every replica slot some run has, in slot order; none without replicas."""
    slots = max((len(_rows_of(s)) for s in summaries), default=0)
    return tuple(
        row
        for i in range(slots)
        for row in (
            *(f"{PREFIX}{i}.{name}" for name in SCALARS),
            *(f"{PREFIX}{i}.{m} {s}" for m in LATENCIES for s in STATS),
        )
    )


def replica_value(summary: Summary, row: str) -> float | None:
    """The number behind a row of ``replica_rows``: ``"replica.1.tpot_ms p99"``,
    ``"replica.0.share"``; None where the run has no such replica or figure."""
    label, _, stat = row.partition(" ")
    slot, _, name = label.removeprefix(PREFIX).partition(".")
    rows = _rows_of(summary)
    if not slot.isdigit() or int(slot) >= len(rows):
        return None
    value = rows[int(slot)].get(name)
    if stat:
        value = (value or {}).get(stat)
    return None if value is None else float(value)
