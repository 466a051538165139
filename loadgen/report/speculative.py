"""The "Speculative decoding" section, beside the latency table (runs whose server reported
speculation: drafts in its counters, or an acceptance length; never a stream's several tokens an
event alone): what the draft model buys.

Read from ``summary.json``'s ``speculative`` block (``server/speculative.py``): the server's
acceptance rate and mean acceptance length (per draft position when it counts them), the
stream's tokens per event, the run's TPOT p50 beside them, and each stage's when there are stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.report.blocks import Section, Table, Text, num
from loadgen.summary import Summary

TITLE = "Speculative decoding"
HEADER = ("", "acceptance rate", "mean acceptance length", "tokens per event (stream)", "TPOT p50 ms")


def line(spec: Mapping[str, Any]) -> str:
    """The block in one line (the console's)."""
    parts = []
    srv = spec.get("server")
    if srv:
        rate = srv.get("acceptance_rate")
        parts.append(
            (f"acceptance {rate:.1%}, " if rate is not None else "")
            + f"mean length {srv['mean_acceptance_length']:.2f} tokens a step (server)"
        )
    stream = spec.get("stream")
    if stream:
        parts.append(f"{stream['tokens_per_event']:.2f} tokens an event (stream)")
    return "; ".join(parts)


def _row(name: str, spec: dict[str, Any] | None, tpot: float | None) -> tuple[str, ...]:
    srv = (spec or {}).get("server") or {}
    stream = (spec or {}).get("stream") or {}
    rate = srv.get("acceptance_rate")
    return (
        name,
        "-" if rate is None else f"{rate:.1%}",
        num(srv.get("mean_acceptance_length")),
        num(stream.get("tokens_per_event")),
        num(tpot),
    )


def speculative_section(summary: Summary) -> Section | None:
    """The table; None for a run without speculation to describe."""
    spec = summary.get("speculative")
    if not spec:
        return None
    rows = [_row("run", dict(spec), summary["metrics"]["tpot_ms"]["p50"])]
    for s in summary.get("stages") or []:
        stage_spec = s.get("speculative")
        rows.append(
            _row(str(s["name"]), dict(stage_spec) if stage_spec else None, s["metrics"]["tpot_ms"]["p50"])
        )
    blocks: list[Any] = [
        Text(
            "The server's acceptance from its draft counters (vLLM) or acceptance-length gauge (SGLang) "
            "over the measured window; the stream's tokens per token-bearing event (where the server "
            "counted each event's tokens) estimate the same length from the client's side (a step's "
            "accepted tokens arrive in one event)."
        ),
        Table(HEADER, tuple(rows)),
    ]
    per = (spec.get("server") or {}).get("per_position")
    if per:
        shares = ", ".join(f"{i + 1}: {p:.1%}" for i, p in enumerate(per))
        blocks.append(Text(f"accepted by draft position: {shares}"))
    return Section(TITLE, tuple(blocks))
