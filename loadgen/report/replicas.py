"""The "Replicas" section: a run over several replica URLs (``target.urls``), one row per replica.

Read from ``summary.json``'s ``replicas`` block: each replica's share of the requests and their
outcome (failures by class: a replica that died costs its own requests, as connect and read
errors), TTFT / TPOT / E2E, its part of the throughput, and a sentence naming the replica that
held the most of the requests beyond the pooled p99 TTFT and E2E, beside its share of all of them.
"""

from __future__ import annotations

from loadgen.report.blocks import LATENCY_HEADER, Section, Table, Text, latency_cells
from loadgen.summary import Summary
from loadgen.summary.replicas import Replicas

TITLE = "Replicas"
HEADER = (
    "replica",
    "URL",
    "share",
    "sent",
    "ok",
    "failed",
    "errors",
    *LATENCY_HEADER,
)
_POLICY = {
    "round_robin": "round robin",
    "least_in_flight": "to the replica with the fewest requests in flight",
    "session_affinity": "with each session's turns kept on one replica",
}
_NAMES = {"ttft_ms": "TTFT", "e2e_ms": "E2E"}


def tail_sentences(block: Replicas) -> list[str]:
    """Which replica dragged each tail: one sentence per metric with requests beyond its p99."""
    out = []
    for t in block["tail"]:
        share = t["share_of_requests"]
        of_all = "" if share is None else f" while it served {share:.0%} of the requests"
        out.append(
            f"Replica {t['replica']} held {t['share_of_tail']:.0%} of the {t['beyond']} "
            f"request{'s' if t['beyond'] != 1 else ''} "
            f"beyond the pooled p99 {_NAMES.get(t['metric'], t['metric'])} "
            f"({t['pooled_p99']:.1f} ms){of_all}."
        )
    return out


def _errors(by_class: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(by_class.items())) or "-"


def replicas_section(summary: Summary) -> Section | None:
    """The per-replica table and the tail's sentences; None for a run against one URL."""
    block = summary.get("replicas")
    if not block:
        return None
    rows = tuple(
        (
            str(r["replica"]),
            r["url"],
            "-" if r["share"] is None else f"{r['share']:.1%}",
            str(r["sent"]),
            str(r["ok"]),
            str(r["failed"]),
            _errors(r["errors_by_class"]),
            *latency_cells(r),
        )
        for r in block["by_replica"]
    )
    how = _POLICY.get(block["balance"], block["balance"])
    parts: list[Text | Table] = [
        Text(
            f"The load went to {len(rows)} replicas, {how} (target.balance: {block['balance']}); "
            "the counts add up to the run's and the rates are per second of the run's window."
        ),
        Table(HEADER, rows, "llr" + "r" * (len(HEADER) - 3)),
    ]
    parts += [Text(s) for s in tail_sentences(block)]
    return Section(TITLE, tuple(parts))
