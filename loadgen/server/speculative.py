"""Speculative decoding, as the server counts it and as the stream shows it: what the draft
model buys, beside TPOT, over the run's measured window and per stage.

The server's view (vLLM: ``spec_decode_num_drafts``, ``…_draft_tokens``, ``…_accepted_tokens``
and ``…_accepted_tokens_per_pos`` counters; SGLang: its ``spec_accept_length`` gauge): counter
deltas from the last scrape at or before the window's start to the first at or after its end
(the scrapes are an interval apart, so a window's edges are that coarse). The acceptance rate is
accepted / drafted tokens; the mean acceptance length is the tokens one verification step emits,
1 + accepted / drafts (vLLM's definition); per position, the share of drafts whose token at that
position was accepted.

The stream's view: a server streaming one event per decoding step puts a step's accepted tokens
in one event, so tokens per token-bearing event estimate the acceptance length from the client's
side. Only where the server counted each event's tokens (``token_source`` ``continuous_usage``):
a chunk's text re-tokenized locally (``tokenizer``) can come out as two tokens where the server
sent one, and with one assumed per event there is nothing to read.

The block exists only when the server reports speculation: drafts in its counters (vLLM) or an
acceptance length (SGLang). Several tokens an event alone never make one: a lagging stream
merges steps, a server may batch its detokenized text, and neither is a draft model; the
stream's figures are shown beside the server's, not instead of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loadgen.analysis.table import RecordTable
from loadgen.server.engines import PER_POSITION
from loadgen.summary.server import Speculative, SpeculativeServer, SpeculativeStream

__all__ = ["speculative_block"]

_COUNTED = ("continuous_usage",)  # the token source whose per-event counts are the server's


def _edges(rows: Sequence[Mapping[str, Any]], span: tuple[int, int] | None) -> tuple[Mapping, Mapping]:
    if span is None:
        return rows[0], rows[-1]
    before = [r for r in rows if r["t_ns"] <= span[0]]
    after = [r for r in rows if r["t_ns"] >= span[1]]
    return (before[-1] if before else rows[0]), (after[0] if after else rows[-1])


def _delta(a: Mapping, b: Mapping, key: str) -> float | None:
    x, y = a.get(key), b.get(key)
    if x is None or y is None or y < x:  # absent, or the counter went back (a restart)
        return None
    return float(y - x)


def server_figures(
    rows: Sequence[Mapping[str, Any]], span: tuple[int, int] | None
) -> SpeculativeServer | None:
    """The server's acceptance over ``span`` (see the module's docstring); None without any."""
    if not rows:
        return None
    first, last = _edges(rows, span)
    drafts = _delta(first, last, "spec_drafts_total")
    drafted = _delta(first, last, "spec_draft_tokens_total")
    accepted = _delta(first, last, "spec_accepted_tokens_total")
    if drafts and drafted and accepted is not None:
        out: SpeculativeServer = {
            "drafts": drafts,
            "draft_tokens": drafted,
            "accepted_tokens": accepted,
            "acceptance_rate": accepted / drafted,
            "mean_acceptance_length": 1 + accepted / drafts,
            "source": "counters",
        }
        a, b = first.get(PER_POSITION), last.get(PER_POSITION)
        if a is not None and b is not None and len(a) == len(b):
            out["per_position"] = [(y - x) / drafts for x, y in zip(a, b)]
        return out
    inside = [r for r in rows if span is None or span[0] <= r["t_ns"] <= span[1]] or list(rows)
    lengths = [r["spec_accept_length"] for r in inside if r.get("spec_accept_length")]
    if lengths:
        return {"mean_acceptance_length": sum(lengths) / len(lengths), "source": "gauge"}
    return None


def stream_figures(table: RecordTable) -> SpeculativeStream | None:
    """Tokens per token-bearing event over the measured ok requests whose events were counted;
    None when no event's count is known."""
    if not len(table):
        return None
    sources = table.column("token_source")
    rows = table.column("ok") & ~table.column("warmup") & np.isin(sources, _COUNTED)
    events = tokens = multi = 0
    for block in table.chunk_blocks(rows):
        events += len(block.tokens)
        tokens += int(np.sum(block.tokens, dtype=np.int64))
        multi += int(np.count_nonzero(np.asarray(block.tokens) > 1))
    if events == 0:
        return None
    return {
        "events": events,
        "tokens": tokens,
        "tokens_per_event": tokens / events,
        "multi_token_events": multi / events,
    }


def speculative_block(
    rows: Sequence[Mapping[str, Any]] | None, span: tuple[int, int] | None, table: RecordTable
) -> Speculative | None:
    """``{"server": …, "stream": …}`` over ``span`` (the stream's may be None); None unless the
    server reports speculation (drafts, or an acceptance length): a stream's several tokens an
    event alone are not a draft model (see the module's docstring)."""
    server = server_figures(rows, span) if rows else None
    if server is None:
        return None
    return {"server": server, "stream": stream_figures(table)}
