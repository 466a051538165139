"""The four corners, first in every report: where the run stands on each corner of the
tetrahedron an inference deployment trades along (latency, throughput, quality, memory and cost).

A faster configuration is only better if it did not buy its speed on another corner: FP8 that
answers differently, a batch size that fills the KV cache, a GPU that costs twice as much. So
every corner gets a row, and a corner the run did not measure says so and how to measure it,
instead of being left out. Figures are read from ``summary.json`` (and ``cost.json``'s
content), as the other sections read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen import metric_defs
from loadgen.analysis.cost import COST_LABEL
from loadgen.report.blocks import Table, money, num, pct
from loadgen.report.telemetry import energy_text
from loadgen.summary import GaugeStats, Summary
from loadgen.summary.server import ServerGauges

HEADER = ("four corners", "this run")
QUALITY_PROFILE = "profiles/quality.yaml"
NOT_MEASURED = f"not measured: no expected answers (see {QUALITY_PROFILE})"


def corners_table(summary: Summary, cost: Mapping[str, Any] | None) -> Table:
    """One row per corner: (corner, what the run measured there)."""
    return Table(HEADER, corner_rows(summary, cost), "ll")


def corner_rows(summary: Summary, cost: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    return (
        ("latency", latency(summary)),
        ("throughput", throughput(summary)),
        ("quality", quality(summary)),
        ("memory and cost", memory_and_cost(summary, cost)),
    )


# The latency corner: the first token's wait, then the pace of the others (TPOT, or ITL when no
# request had two tokens to time).
FIRST, PACE = "ttft_ms", ("tpot_ms", "itl_ms")


def latency(summary: Summary) -> str:
    """p50/p99 of ``FIRST``, then of the first of ``PACE`` with samples, by their registry labels;
    a run without a token stream (embeddings, rerank: no ``FIRST`` in its summary) has E2E."""
    if not metric_defs.present(summary, FIRST):
        return _p50_p99(summary, "e2e_ms")
    text = _p50_p99(summary, FIRST)
    for name in PACE:
        if (metric_defs.lookup(summary, name) or {}).get("count"):
            return f"{text}; {_p50_p99(summary, name)}"
    return text


def _p50_p99(summary: Summary, name: str) -> str:
    d = metric_defs.lookup(summary, name) or {}
    return f"{metric_defs.get(name).label} p50 {num(d.get('p50'))} ms, p99 {num(d.get('p99'))} ms"


def throughput(summary: Summary) -> str:
    m: Mapping[str, Any] = summary.get("metrics") or {}
    goodput = m.get("goodput") or {}
    volume = "items_per_s" if "items_per_s" in m else "output_tokens_per_s"
    return (
        f"{num(m.get(volume))} {metric_defs.get(volume).label}, {num(m.get('request_throughput_rps'))} "
        f"requests/s; goodput {num(goodput.get('requests_per_s'))} requests/s "
        f"({pct(goodput.get('attained_fraction'))} met every SLO)"
    )


def quality(summary: Summary) -> str:
    """Accuracy over the scored answers, or why there is none; and whether answers were kept
    (what ``loadgen compare`` needs for output agreement)."""
    q = summary.get("quality")
    if not q:
        return NOT_MEASURED
    parts = []
    if q.get("scored"):
        parts.append(
            f"accuracy {pct(q.get('accuracy'))} ({q.get('correct')} of {q['scored']} scored answers right)"
        )
    if q.get("json_scored"):
        parts.append(
            f"JSON valid {pct(q.get('json_valid'))} ({q.get('json_valid_answers')} of {q['json_scored']} "
            "structured answers valid against their schema)"
        )
    modelled = q.get("modelled")
    if modelled and parts and q.get("scored"):
        parts[0] += (
            f", {modelled.get('note')}: the preset is set to {pct(modelled.get('accuracy'))} "
            f"({modelled.get('base_source')}, x {modelled['weights']['retained']} for "
            f"{modelled['weights']['precision']} weights)"
        )
    text = "; ".join(parts) or NOT_MEASURED
    kept = q.get("answers_kept")
    if kept:
        cut = q.get("answers_truncated") or 0
        text += (
            f"; {kept} answers kept"
            + (f" ({cut} cut at {q.get('max_chars')} characters)" if cut else "")
            + " for `loadgen compare`'s output agreement"
        )
    return text


def memory_and_cost(summary: Summary, cost: Mapping[str, Any] | None) -> str:
    """The server's KV-cache use and prefix-cache hit rate (from its /metrics, when scraped),
    the GPUs' energy per token, power and memory (when read), and dollars per million output
    tokens (when a GPU price is known)."""
    server = summary.get("server")
    gauges: ServerGauges = (server.get("gauges") or {}) if server else {}
    kv: GaugeStats = gauges.get("kv_cache_usage") or {}
    parts = [
        f"KV cache {pct(kv.get('mean'))} mean, {pct(kv.get('max'))} max"
        if kv.get("samples")
        else "KV cache not measured (the server's /metrics gave no KV-cache usage)"
    ]
    prefix = server.get("prefix_cache") if server else None
    if prefix and prefix.get("hit_rate") is not None:
        parts.append(
            f"prefix-cache hit rate {pct(prefix['hit_rate'])} "
            f"({prefix.get('hits'):,.0f} of {prefix.get('queries'):,.0f} prompt tokens)"
        )
    parts.append(energy_text(summary))
    if cost is not None and "usd_per_million_items" in cost:  # embeddings, rerank
        parts.append(f"{money(cost.get('usd_per_million_items'))} per million items")
    elif cost is not None:
        parts.append(f"{money(cost.get('usd_per_million_output_tokens'))} per million output tokens")
    else:
        parts.append(
            f"cost not computed: give a GPU-hour price (loadgen report --gpu-hour-cost USD, or "
            f"--label {COST_LABEL}=USD when running)"
        )
    return "; ".join(parts)
