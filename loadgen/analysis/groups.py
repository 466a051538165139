"""Figures of one group of a run's measured requests: a model of a LoRA mix (``models``), a
replica of a fleet (``replicas``).

A split block partitions the measured requests by one key, and each group's row has the same
core: sent, ok and failed (a cancelled request is neither), TTFT / TPOT / E2E p50 and p99 over
its ok requests, and output tokens over the run's window (not the group's own span), so the
rows' counts and rates add up to the run's. One place computes that core, so the blocks cannot
drift apart in what "failed" or "output tok/s" means.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from typing_extensions import TypedDict

from loadgen.analysis.counts import filled
from loadgen.analysis.distribution import distribution
from loadgen.analysis.metrics import derived_columns
from loadgen.analysis.table import RecordTable
from loadgen.records import CANCELLED


class Latency(TypedDict):
    p50: float | None
    p99: float | None


class GroupFigures(TypedDict):
    sent: int
    ok: int
    failed: int
    ttft_ms: Latency
    tpot_ms: Latency
    e2e_ms: Latency
    output_tokens_per_s: float | None


@dataclass(frozen=True)
class Split:
    """The columns every group's figures are read from, taken once per block."""

    measured: np.ndarray  # not warm-up
    ok: np.ndarray
    failed: np.ndarray  # not ok and not cancelled
    derived: dict[str, np.ndarray]
    output_tokens: np.ndarray
    seconds: float  # the run's window

    @classmethod
    def of(cls, table: RecordTable, seconds: float) -> Split:
        ok = table.column("ok")
        return cls(
            ~table.column("warmup"),
            ok,
            ~ok & (table.column("error_class") != CANCELLED),
            derived_columns(table),
            filled(table, "output_tokens"),
            seconds,
        )

    def rate(self, count: float) -> float | None:
        """``count`` per second of the run's window; None for a window of no length."""
        return float(count / self.seconds) if self.seconds > 0 else None

    def figures(self, mine: np.ndarray) -> GroupFigures:
        """The core row of the measured requests in ``mine`` (a mask over the table)."""
        mine = mine & self.measured
        mine_ok = mine & self.ok
        return {
            "sent": int(mine.sum()),
            "ok": int(mine_ok.sum()),
            "failed": int((mine & self.failed).sum()),
            "ttft_ms": _latency(self.derived["ttft_ms"][mine_ok]),
            "tpot_ms": _latency(self.derived["tpot_ms"][mine_ok]),
            "e2e_ms": _latency(self.derived["e2e_ms"][mine_ok]),
            "output_tokens_per_s": self.rate(int(self.output_tokens[mine_ok].sum())),
        }


def _latency(values: np.ndarray) -> Latency:
    d = distribution(values)
    return {"p50": d["p50"], "p99": d["p99"]}
