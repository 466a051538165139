"""The report's content as plain blocks, rendered to Markdown and to HTML by their modules,
so the two reports always say the same thing in the same order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: str = ""  # one "l" or "r" per column; missing columns are left-aligned


@dataclass(frozen=True, slots=True)
class Alert:
    level: str  # "ok", "warning" or "error"
    title: str
    text: str = ""


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Image:
    file: str  # relative to the report, e.g. "plots/cdf_ttft.png"
    title: str
    caption: str
    png: bytes = field(repr=False, default=b"")


@dataclass(frozen=True, slots=True)
class Markup:
    """Markup report.html shows as it is (built by loadgen from numbers, every value escaped),
    and the ``text`` report.md shows in its place."""

    html: str = field(repr=False)
    text: str


Block = Table | Alert | Text | Image | Markup


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    blocks: tuple[Block, ...]
    level: int = 2

    @property
    def anchor(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.title.lower()).strip("-")


def num(v: object, digits: int = 2) -> str:
    """A number for a table: fixed decimals with thousands separators; "-" when absent."""
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def pct(v: object, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}%}"


def money(v: float | None) -> str:
    """Dollars to four significant figures ($1.027, $0.2708), cents from $100 up."""
    if v is None:
        return "-"
    return f"${v:,.2f}" if abs(v) >= 100 else f"${v:.4g}"


# A split block's latency and throughput columns (models, replicas: analysis/groups.py's row).
LATENCY_HEADER = (
    "TTFT p50 (ms)",
    "TTFT p99 (ms)",
    "TPOT p50 (ms)",
    "TPOT p99 (ms)",
    "E2E p50 (ms)",
    "E2E p99 (ms)",
    "output tok/s",
)


def latency_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """A group row's cells under ``LATENCY_HEADER``."""
    latencies = (row[m][q] for m in ("ttft_ms", "tpot_ms", "e2e_ms") for q in ("p50", "p99"))
    return (*(num(v) for v in latencies), num(row["output_tokens_per_s"], 1))
