"""The console's lines for the summary's blocks that add to a run's table: production-like
traffic (accuracy, TTFT by turn, a LoRA mix's models, the prefix-cache hit rate) and the
measurement's fidelity.

Console text belongs to the CLI: ``analysis/`` returns the blocks as data, and these turn them
into the sentences ``loadgen run`` prints (``cli.console``).
"""

from __future__ import annotations

from typing import Any

from loadgen.analysis import traffic


def traffic_lines(summary: dict[str, Any]) -> list[str]:
    """One line each for what production-like traffic adds to a run: accuracy, TTFT by turn,
    the server's prefix-cache hit rate."""
    lines = []
    q = summary.get("quality")
    if q:
        acc = "not scored" if q["accuracy"] is None else f"accuracy {q['accuracy']:.1%}"
        kept = f"; {q['answers_kept']} answers kept" if q["answers_kept"] else ""
        lines.append(f"quality     {acc} ({q['correct']} of {q['scored']} scored answers right){kept}")
    sess = summary.get("sessions")
    if sess and sess["by_turn"]:
        turns = ", ".join(
            f"{t['turn']}: {t['ttft_ms']['p50']:.1f}"
            for t in sess["by_turn"]
            if t["ttft_ms"]["p50"] is not None
        )
        lines.append(f"sessions    {sess['sessions']}; TTFT p50 by turn (ms) {turns}")
    for r in (summary.get("models") or {}).get("by_model") or []:
        ttft = r["ttft_ms"]["p50"]
        lines.append(
            f"model {r['model']}  sent {r['sent']}  ok {r['ok']}  failed {r['failed']}  TTFT p50 "
            + ("-" if ttft is None else f"{ttft:.1f} ms")
        )
    cache = (summary.get("server") or {}).get("prefix_cache") or {}
    hit = cache.get("hit_rate")
    if hit is not None and (hit > 0 or traffic.shares_prefix(summary)):
        lines.append(
            f"prefix cache  server hit rate {cache['hit_rate']:.1%} "
            f"({cache['hits']:,.0f} of {cache['queries']:,.0f} prompt tokens)"
        )
    return lines


def fidelity_line(block: dict[str, Any]) -> str:
    """The one line ``loadgen run`` prints: the first-token lag and how many requests back it."""
    first, chunk = block["first_token_lag_ms"], block["chunk_lag_ms"]
    if not block["requests_matched"] or chunk["count"] == 0:
        return "measurement error vs the simulator's ground truth: no request to match"
    if first["count"] == 0:  # answers read whole (embeddings, rerank): no first token
        text = (
            f"measurement error vs the simulator's ground truth: whole answer +{chunk['p50']:.2f} ms p50 / "
            f"+{chunk['p99']:.2f} ms p99 ({block['requests_matched']:,} requests matched): {block['verdict']}"
        )
        return text + (" (" + "; ".join(block["reasons"]) + ")" if block["reasons"] else "")
    text = (
        f"measurement error vs the simulator's ground truth: first token +{first['p50']:.2f} ms p50 / "
        f"+{first['p99']:.2f} ms p99, every chunk +{chunk['p99']:.2f} ms p99 "
        f"({block['requests_matched']:,} requests matched): {block['verdict']}"
    )
    if block["reasons"]:
        text += " (" + "; ".join(block["reasons"]) + ")"
    return text
