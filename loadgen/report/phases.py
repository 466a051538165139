"""The "HTTP phases" section: where the measured requests' time went below the protocol, phase
by phase, and how often a connection was reused (runs over httptools or httpx only).

Read from ``summary.json``'s ``http_phases`` block; each phase's durations are its own sample
(a reused connection has no dns, connect or tls), so each row gives its count.
"""

from __future__ import annotations

from loadgen.report.blocks import Section, Table, Text, num, pct
from loadgen.summary import Summary

TITLE = "HTTP phases"
HEADER = ("phase (ms)", "requests", "p50", "p90", "p99", "max")
# The block's phases, in the order they happen, with what each one is.
PHASES: tuple[tuple[str, str], ...] = (
    ("dns", "resolving the host"),
    ("connect", "TCP handshake"),
    ("tls", "TLS handshake"),
    ("write", "writing the request"),
    ("wait", "waiting for the first byte"),
    ("download", "reading the answer"),
)


def phases_section(summary: Summary) -> Section | None:
    """The phases table; None for a run whose transport stamped none (aiohttp)."""
    block = summary.get("http_phases")
    if not block:
        return None
    dists = block["phases_ms"]
    rows = tuple(
        (
            f"{name}: {what}",
            str(d["count"]),
            num(d["p50"], 3),
            num(d["p90"], 3),
            num(d["p99"], 3),
            num(d["max"], 3),
        )
        for name, what in PHASES
        for d in (dists[name],)  # type: ignore[literal-required]
    )
    text = (
        f"{block['requests']} measured requests: {block['fresh_connections']} on a fresh connection "
        f"({block['tls_handshakes']} with a TLS handshake), {block['reused_connections']} on a reused one "
        f"(reuse rate {pct(block['reuse_rate'])}). Each phase counts the requests that went through it."
    )
    return Section(TITLE, (Text(text), Table(HEADER, rows, "l" + "r" * (len(HEADER) - 1))))
