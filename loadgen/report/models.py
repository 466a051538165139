"""The "Models" section: a LoRA mix's figures per model asked for (runs with ``workload.models``).

One row per model, in the profile's order, read from ``summary.json``'s ``models`` block: its
share of the requests and their outcome, TTFT / TPOT / E2E, and its part of the throughput and
goodput. An adapter the server had to load before its prompt ran shows as a TTFT above the base
model's while its TPOT stays the same.
"""

from __future__ import annotations

from loadgen.report.blocks import LATENCY_HEADER, Section, Table, Text, latency_cells, num
from loadgen.summary import Summary

TITLE = "Models"
HEADER = (
    "model",
    "sent",
    "ok",
    "failed",
    *LATENCY_HEADER,
    "goodput req/s",
)


def models_section(summary: Summary) -> Section | None:
    """The per-model table; None for a run without a mix."""
    block = summary.get("models")
    if not block:
        return None
    rows = tuple(
        (
            r["model"],
            str(r["sent"]),
            str(r["ok"]),
            str(r["failed"]),
            *latency_cells(r),
            num(r["goodput_requests_per_s"]),
        )
        for r in block["by_model"]
    )
    how = "a seeded weighted draw" if block["choice"] == "weighted" else "round robin"
    return Section(
        TITLE,
        (
            Text(
                f"Each request asked for one model of the mix ({how}); the counts add up to the "
                "run's and the rates are per second of the run's window. A LoRA adapter the "
                "server had to load before its prompt ran raises its TTFT, not its TPOT."
            ),
            Table(HEADER, rows, "l" + "r" * (len(HEADER) - 1)),
        ),
    )
