"""The report's content as plain blocks, rendered to Markdown and to HTML by their modules,
so the two reports always say the same thing in the same order."""

from __future__ import annotations

from dataclasses import dataclass, field


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
