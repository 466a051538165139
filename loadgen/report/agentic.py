"""The agentic block in the report (the "Agentic rounds" section) and on the console.

Figures are read from ``summary.json``: per-session rounds and time across the sessions, and
where that time went (the server, or the tools between rounds), beside the prefix-cache hit
the server counted. Which of the two waits dominates says whether the server or the agent's
tools bound a session, and a long tool wait is what a prefix cache must hold a session across.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.report.blocks import Section, Table, Text, num, pct
from loadgen.summary import Summary

TITLE = "Agentic rounds"
HEADER = ("per session", "mean", "p50", "p99", "max")
ROWS = (
    ("rounds_per_session", "rounds"),
    ("session_s", "session time (s)"),
    ("server_wait_s", "waiting on the server (s)"),
    ("tool_wait_s", "waiting on tools (s)"),
)


def _hit(a: Mapping[str, Any]) -> str:
    cache = a.get("prefix_cache")
    if not cache or cache.get("hit_rate") is None:
        return "the server's /metrics gave no prefix-cache hit"
    return f"the rounds' prefix-cache hit was {pct(cache['hit_rate'])} ({cache['source']})"


def agentic_section(summary: Summary) -> Section | None:
    """Per-session figures of an agentic run; None for a run without agentic sessions."""
    a: Mapping[str, Any] | None = summary.get("agentic")
    if not a:
        return None
    rows = tuple((label, *(num(a[key][k]) for k in HEADER[1:])) for key, label in ROWS)
    share = pct(a["server_share"]) if a.get("server_share") is not None else "no"
    return Section(
        TITLE,
        (
            Text(
                f"{a['sessions']} {a['kind']} sessions, {a['rounds']} rounds ({a['failed_rounds']} failed); "
                f"{share} of their time waiting on the server, the rest on "
                f"tools between rounds; {_hit(a)}. A round is sent only after its predecessors' answers "
                "and the pause after them, with the whole history."
            ),
            Table(HEADER, rows, "l" + "r" * (len(HEADER) - 1)),
        ),
    )


def agentic_lines(summary: Summary) -> list[str]:
    """The console's line: sessions, rounds, time split and the prefix-cache hit."""
    a = summary["agentic"]
    s, srv, tool = a["session_s"], a["server_wait_s"], a["tool_wait_s"]
    if s["p50"] is None:
        return []
    cache = a.get("prefix_cache")
    hit = (
        f"; prefix-cache hit {pct(cache['hit_rate'])} (server)"
        if cache and cache["hit_rate"] is not None
        else ""
    )
    return [
        f"agentic     {a['sessions']} sessions, {a['rounds']} rounds; session p50 {s['p50']:.2f} s "
        f"(server {srv['p50']:.2f} s, tools {tool['p50']:.2f} s){hit}"
    ]
