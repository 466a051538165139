"""Production-like traffic in the report: where the prompts came from (a row of the conditions
table) and, for multi-turn runs, TTFT by turn (the "Sessions" section).

A dataset's or a trace's figures are conditions like the load shape: the same server answers a
replayed trace with heavy prefix reuse very differently from uniform synthetic prompts, so the
source is named where the conditions are. Figures are read from ``summary.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from loadgen.report.blocks import Section, Table, Text, num, pct
from loadgen.summary import Summary

TITLE = "Sessions"
SESSION_HEADER = (
    "turn",
    "requests",
    "TTFT p50 (ms)",
    "TTFT p90 (ms)",
    "TTFT p99 (ms)",
    "TTFT mean (ms)",
    "prompt tokens (mean)",
)


def traffic_text(traffic: Mapping[str, Any] | None) -> str | None:
    """The prompts' source in one line; None for synthetic prompts (the lengths table says all)."""
    agent = (traffic or {}).get("agentic")
    if agent:  # agent sessions: what shaped each round is the last answer, not a length table
        where = f" from {agent['path']}" if agent.get("path") else ""
        return f"agent sessions ({agent['kind']}{where}): each round built from the last answer"
    if not traffic or traffic.get("source", "synthetic") == "synthetic":
        return None
    source = traffic["source"]
    if source == "dataset":
        d = traffic.get("dataset") or {}
        text = f"dataset {d.get('path')} ({d.get('format')}, {d.get('entries')} entries)"
    elif source == "trace":
        t = traffic.get("trace") or {}
        text = (
            f"trace {t.get('path')} ({t.get('format')}): {t.get('requests')} requests over "
            f"{num(t.get('span_s'))} s"
        )
        if t.get("designed_prefix_reuse") is not None:
            text += (
                f"; designed prefix reuse {pct(t['designed_prefix_reuse'])} "
                f"(blocks of {t.get('block_tokens')} tokens)"
            )
    elif source == "tasks":
        kinds = (traffic.get("tasks") or {}).get("kinds") or []
        text = "built-in tasks with exact answers (" + ", ".join(kinds) + ")"
    else:
        text = str(source)
    prefix = traffic.get("prefix")
    if prefix:
        text += (
            f"; shared prefix of {prefix.get('shared_tokens')} tokens in {prefix.get('groups')} "
            f"group(s), {pct(prefix.get('fraction'))} of requests"
        )
    return text


def with_traffic(conditions: Section, summary: Summary) -> Section:
    """The conditions section with a "traffic" row after "requests" (last when there is none)
    in its first table, when the prompts were not synthetic."""
    text = traffic_text((summary.get("conditions") or {}).get("traffic"))
    if text is None:
        return conditions
    blocks = list(conditions.blocks)
    for i, block in enumerate(blocks):
        if isinstance(block, Table):
            rows = list(block.rows)
            at = next((k + 1 for k, r in enumerate(rows) if r[0] == "requests"), len(rows))
            rows.insert(at, ("traffic", text))
            blocks[i] = replace(block, rows=tuple(rows))
            break
    return replace(conditions, blocks=tuple(blocks))


def sessions_section(summary: Summary) -> Section | None:
    """TTFT by turn of a multi-turn run; None for a run without sessions."""
    s = summary.get("sessions")
    if not s:
        return None
    rows = tuple(
        (
            str(r.get("turn")),
            str(r.get("requests")),
            num((r.get("ttft_ms") or {}).get("p50")),
            num((r.get("ttft_ms") or {}).get("p90")),
            num((r.get("ttft_ms") or {}).get("p99")),
            num((r.get("ttft_ms") or {}).get("mean")),
            num(r.get("prompt_tokens_mean"), 1),
        )
        for r in s.get("by_turn") or []
    )
    turns: Mapping[str, Any] = s.get("turns_per_session") or {}
    return Section(
        TITLE,
        (
            Text(
                f"{s.get('sessions')} sessions, {num(turns.get('mean'))} turns each on average "
                f"(at most {num(turns.get('max'), 0)}); {s.get('failed_turns')} failed turns. "
                "Each turn resends the conversation so far plus a new message: a server with a "
                "prefix cache recomputes only the new part, so later turns' TTFT should not grow "
                "with their prompt."
            ),
            Table(SESSION_HEADER, rows, "l" + "r" * (len(SESSION_HEADER) - 1)),
        ),
    )
