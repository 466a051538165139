"""report.md: the sections as GitHub-flavoured Markdown, plots linked from plots/."""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.report.blocks import Alert, Image, Markup, Section, Table, Text

_ICONS = {"ok": "OK", "warning": "WARNING", "error": "FAIL"}


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    lines = [f"# {title}", ""]
    for section in sections:
        lines += [f"{'#' * section.level} {section.title}", ""]
        for block in section.blocks:
            lines += _block(block)
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def table_lines(table: Table) -> list[str]:
    align = table.align.ljust(len(table.header), "l")
    rule = ["--:" if a == "r" else "---" for a in align]
    return [_row(table.header), _row(rule)] + [_row(r) for r in table.rows]


def _block(block: object) -> list[str]:
    if isinstance(block, Table):
        return table_lines(block)
    if isinstance(block, Alert):
        text = f" {block.text}" if block.text else ""
        return [f"> **[{_ICONS.get(block.level, block.level)}] {block.title}**{text}"]
    if isinstance(block, Text | Markup):
        return [block.text]
    if isinstance(block, Image):
        return [f"![{block.title}]({block.file})", "", f"*{block.caption}*"]
    raise TypeError(f"unknown report block {block!r}")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
