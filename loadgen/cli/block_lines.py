"""The console's lines for the summary's blocks that add to a run's table: production-like
traffic (accuracy, TTFT by turn, a LoRA mix's models, the media sent, the prefix-cache hit rate) and the
measurement's fidelity.

Console text belongs to the CLI: ``analysis/`` returns the blocks as data, and these turn them
into the sentences ``loadgen run`` prints (``cli.console``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.analysis import traffic
from loadgen.report import speculative
from loadgen.report.replicas import tail_sentences
from loadgen.summary import Fidelity, Summary


def quality_lines(summary: Summary) -> list[str]:
    """Accuracy of the scored answers, and the valid share of the structured ones."""
    q, lines = summary["quality"], []
    if q["scored"] or q["answers_kept"] or not q.get("json_scored"):
        acc = "not scored" if q["accuracy"] is None else f"accuracy {q['accuracy']:.1%}"
        kept = f"; {q['answers_kept']} answers kept" if q["answers_kept"] else ""
        modelled = " (modelled by the simulator, not measured)" if q.get("modelled") else ""
        lines.append(
            f"quality     {acc} ({q['correct']} of {q['scored']} scored answers right){modelled}{kept}"
        )
    if q.get("json_scored"):
        lines.append(
            f"json valid  {q['json_valid']:.1%} ({q['json_valid_answers']} of {q['json_scored']} "
            "structured answers valid against the schema)"
        )
    return lines


def sessions_lines(summary: Summary) -> list[str]:
    """The sessions and their TTFT by turn."""
    sess = summary["sessions"]
    if not sess["by_turn"]:
        return []
    turns = ", ".join(
        f"{t['turn']}: {t['ttft_ms']['p50']:.1f}" for t in sess["by_turn"] if t["ttft_ms"]["p50"] is not None
    )
    return [f"sessions    {sess['sessions']}; TTFT p50 by turn (ms) {turns}"]


def models_lines(summary: Summary) -> list[str]:
    """One line per model of a LoRA mix."""
    lines = []
    for r in summary["models"].get("by_model") or []:
        ttft = r["ttft_ms"]["p50"]
        lines.append(
            f"model {r['model']}  sent {r['sent']}  ok {r['ok']}  failed {r['failed']}  TTFT p50 "
            + ("-" if ttft is None else f"{ttft:.1f} ms")
        )
    return lines


def replicas_lines(summary: Summary) -> list[str]:
    """One line per replica (share, failures by class, TPOT p50), then who held the tail."""
    block = summary["replicas"]
    lines = []
    for r in block["by_replica"]:
        tpot = r["tpot_ms"]["p50"]
        errors = ", ".join(f"{k} {v}" for k, v in sorted(r["errors_by_class"].items()))
        lines.append(
            f"replica {r['replica']} {r['url']}  sent {r['sent']}  ok {r['ok']}  failed {r['failed']}"
            + (f" ({errors})" if errors else "")
            + "  TPOT p50 "
            + ("-" if tpot is None else f"{tpot:.1f} ms")
        )
    return lines + tail_sentences(block)


def media_lines(summary: Summary) -> list[str]:
    return [media_line(summary["media"])]


def speculative_lines(summary: Summary) -> list[str]:
    return ["speculative " + speculative.line(summary["speculative"])]


def server_lines(summary: Summary) -> list[str]:
    """The server's prefix-cache hit rate (its other figures are in the report)."""
    cache = summary["server"].get("prefix_cache")
    hit = cache.get("hit_rate") if cache else None
    if cache is None or hit is None or not (hit > 0 or traffic.shares_prefix(summary)):
        return []
    scope = f", replica {summary['server']['replica']} only" if "replica" in summary["server"] else ""
    return [
        f"prefix cache  server hit rate {cache['hit_rate']:.1%} "
        f"({cache['hits']:,.0f} of {cache['queries']:,.0f} prompt tokens{scope})"
    ]


def fidelity_line(block: Fidelity) -> str:
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


def media_line(media: Mapping[str, Any]) -> str:
    """What the requests' media were: counts and sizes, per request, and their rates."""
    per, parts, rates = media["per_request"], [], []
    if media["images"]:
        parts.append(
            f"{media['images']} images ({media['megapixels']:.1f} MP, {per['images']:.2f} a request)"
        )
        if media["megapixels_per_s"] is not None:
            rates.append(f"{media['megapixels_per_s']:.2f} MP/s")
    if media["audio_clips"]:
        parts.append(
            f"{media['audio_clips']} audio clips ({media['audio_s']:.1f} s, {per['audio_s']:.2f} s a request)"
        )
        if media["audio_s_per_s"] is not None:
            rates.append(f"{media['audio_s_per_s']:.2f} audio s/s")
    if media["media_bytes_per_s"] is not None:
        rates.append(f"{media['media_bytes_per_s'] / 1e6:.2f} MB/s")
    sent = f"{media['media_bytes'] / 1e6:.1f} MB sent"
    return "media       " + ", ".join(parts) + f"; {sent}" + (f"; {', '.join(rates)}" if rates else "")


def http_phases_lines(summary: Summary) -> list[str]:
    """Connection reuse and the p50 of each HTTP phase a request went through."""
    block = summary["http_phases"]
    phases: Mapping[str, Mapping[str, Any]] = block["phases_ms"]  # type: ignore[assignment]
    p50 = ", ".join(f"{name} {d['p50']:.3g}" for name, d in phases.items() if d["p50"] is not None)
    return [
        f"http phases {block['fresh_connections']} fresh connections, {block['reused_connections']} reused "
        f"({block['reuse_rate']:.0%}); p50 (ms) {p50}"
    ]
