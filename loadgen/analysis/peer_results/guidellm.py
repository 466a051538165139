"""GuideLLM's ``benchmarks.json`` (``GenerativeBenchmarksReport``, guidellm
src/guidellm/benchmark/schemas/report.py; report ``metadata.version`` 2).

``benchmarks[]`` holds one benchmark per load point (a sweep: synchronous, throughput, then
constant rates between them); each has ``config.strategy`` (``type_``, ``rate``, ``streams``),
``duration`` (s), ``start_time`` (Unix s) and ``metrics``, whose distributions are split by
status (``successful``, ``errored``, ``incomplete``, ``total``), each with ``mean``, ``median``,
``std_dev``, ``min``, ``max``, ``count`` and ``percentiles`` (``p50`` ... ``p99``, ``p999``).
Each benchmark is a stage of the comparison; only ``successful`` figures are read, as loadgen's
latencies are over ok requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.analysis.peer_results import common
from loadgen.summary import Summary

TOOL = "GuideLLM"
FILE_NAMES: tuple[str, ...] = ("benchmarks.json",)
# loadgen metric <- (GuideLLM metric, scale to ms). GuideLLM's "inter_token_latency_ms" is
# (last token - first token) / (output tokens - 1): loadgen's TPOT, so it fills tpot_ms.
LATENCIES: dict[str, tuple[str, float]] = {
    "ttft_ms": ("time_to_first_token_ms", 1.0),
    "tpot_ms": ("inter_token_latency_ms", 1.0),
    "e2e_ms": ("request_latency", 1000.0),
}
RATES: dict[str, str] = {
    "request_throughput_rps": "requests_per_second",
    "output_tokens_per_s": "output_tokens_per_second",
    "input_tokens_per_s": "prompt_tokens_per_second",
    "total_tokens_per_s": "tokens_per_second",
}
DEFINITIONS: tuple[str, ...] = (
    "GuideLLM: its ITL (`inter_token_latency_ms`) is (last token - first token) / (output tokens "
    "- 1) per request, loadgen's TPOT formula, and is shown on the tpot_ms rows; its distribution "
    "weights each request by its output tokens - 1, where loadgen counts each request once.",
    "GuideLLM: its TPOT (`time_per_output_token_ms`) is (last token - send) / output tokens, TTFT "
    "included; loadgen has no such metric and it is not shown.",
    "GuideLLM: no per-chunk inter-token gaps are kept, so itl_ms is empty.",
    "GuideLLM: TTFT is stamped at the first token iteration, reasoning deltas included (as "
    "loadgen's); its time to first output token (reasoning excluded) is not shown.",
    "GuideLLM: percentiles are the nearest sample at or above the rank (no interpolation), "
    "timestamps come from `time.time()`, and its rates are time-weighted means over the "
    "benchmark's measured window (warm-up and cool-down excluded).",
)


def recognises(data: Any) -> bool:
    return (
        isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and "schema_version" not in data
    )


def _stats(d: Mapping[str, Any]) -> dict[str, Any]:
    pct: Mapping[str, Any] = d["percentiles"] if isinstance(d.get("percentiles"), Mapping) else {}
    return {
        "mean": d.get("mean"),
        "std": d.get("std_dev"),
        "min": d.get("min"),
        "max": d.get("max"),
        "p50": pct.get("p50", d.get("median")),
        "p90": pct.get("p90"),
        "p95": pct.get("p95"),
        "p99": pct.get("p99"),
        "p99_9": pct.get("p999"),
    }


def _block(b: Mapping[str, Any], path: Path, where: str) -> dict[str, Any]:
    m = common.need_map(b, "metrics", path, TOOL, where)
    totals = common.need_map(m, "request_totals", path, TOOL, where + "metrics.")
    ok = common.need(totals, "successful", path, TOOL, where + "metrics.request_totals.")
    failed = common.number(totals.get("errored"))
    incomplete = common.number(totals.get("incomplete")) or 0
    sent = common.number(totals.get("total"))
    dists: dict[str, dict[str, Any] | None] = {}
    for metric, (name, scale) in LATENCIES.items():
        node = common.get(m, f"{name}.successful")
        dists[metric] = (
            common.distribution(_stats(node), scale, common.number(node.get("count")))
            if isinstance(node, Mapping) and node.get("count")
            else None
        )
    scalars: dict[str, float | None] = {
        k: common.number(common.get(m, f"{v}.successful.mean")) for k, v in RATES.items()
    }
    scalars["mean_concurrency"] = common.number(common.get(m, "request_concurrency.successful.mean"))
    seconds = common.number(b.get("duration"))
    if seconds is None:
        start, end = common.number(b.get("start_time")), common.number(b.get("end_time"))
        seconds = end - start if start is not None and end is not None else None
    return common.measured(common.counts(sent, ok, failed, incomplete), seconds, dists, scalars)


def _load(b: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(stage name, loadgen-shaped load) of a benchmark's scheduling strategy."""
    s = common.get(b, "config.strategy") or {}
    kind = str(s.get("type_") or s.get("type") or "unknown")
    rate, streams, cap = (common.number(s.get(k)) for k in ("rate", "streams", "max_concurrency"))
    if kind == "synchronous":
        return kind, {"concurrency": 1, "rate": None, "arrival": "closed loop"}
    if kind == "concurrent" and streams is not None:
        return f"c={int(streams)}", {"concurrency": int(streams), "rate": None, "arrival": "closed loop"}
    if rate is not None:
        load = {"concurrency": None, "rate": rate, "arrival": kind, "max_concurrency": cap}
        return f"{kind}@{rate:g}", load
    return kind, {"concurrency": None if cap is None else int(cap), "rate": None, "arrival": kind}


def load(data: Any, path: Path, name: str) -> tuple[Summary, str | None]:
    benchmarks = data["benchmarks"]
    if not benchmarks:
        raise common.missing(path, TOOL, "benchmarks.0")
    blocks, stages = [], []
    for i, b in enumerate(benchmarks):
        if not isinstance(b, Mapping):
            raise common.missing(path, TOOL, f"benchmarks.{i}")
        block = _block(b, path, f"benchmarks.{i}.")
        stage_name, stage_load = _load(b)
        blocks.append(block)
        stages.append(common.stage(i, stage_name, stage_load, block, TOOL))
    first = benchmarks[0]
    backend = common.get(first, "config.backend") or {}
    conditions = {
        "target": {"url": backend.get("target"), "model": backend.get("model")},
        "load": _load(first)[1] if len(benchmarks) == 1 else {"sweep": [s["name"] for s in stages]},
        "lengths": {
            "realised": {
                "server_prompt_tokens": _mean(first, "prompt_token_count"),
                "server_output_tokens": _mean(first, "output_token_count"),
            }
        },
    }
    block = blocks[0] if len(blocks) == 1 else common.pooled(blocks)
    summary = common.summary(
        name=name,
        block=block,
        conditions=conditions,
        stages=stages,
        started_at=common.iso(first.get("start_time")),
        ended_at=common.iso(benchmarks[-1].get("end_time")),
    )
    return summary, common.get(data, "metadata.guidellm_version")


def _mean(b: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    node = common.get(b, f"metrics.{name}.successful")
    if not isinstance(node, Mapping) or common.number(node.get("mean")) is None:
        return None
    return {"count": node.get("count"), "mean": node["mean"]}
