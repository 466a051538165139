"""AIPerf's ``profile_export_aiperf.json`` (aiperf/exporters/json_exporter.py,
``JsonExportData``; the layout GenAI-Perf's export had, kept by AIPerf 0.1 to 0.12).

One object per run: each metric under its tag (``time_to_first_token``, ``inter_token_latency``,
``inter_chunk_latency``, ``request_latency``, ``request_throughput``, ``output_token_throughput``,
``request_count``, ``error_request_count``, ``benchmark_duration``, ...) as ``{unit, avg, min,
max, std, p1, p5, p10, p25, p50, p75, p90, p95, p99}`` in its display unit, and the run's
``input_config`` (the user's configuration: endpoint, loadgen, input). A metric AIPerf could not
compute (no streaming, no errors) is left out of the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.analysis.peer_results import common
from loadgen.summary import Summary

TOOL = "AIPerf"
FILE_NAMES: tuple[str, ...] = ("profile_export_aiperf.json",)
# loadgen metric <- AIPerf tag. AIPerf's "inter_token_latency" is (E2E - TTFT) / (OSL - 1): the
# TPOT formula; its per-chunk gaps are "inter_chunk_latency", loadgen's itl_ms.
LATENCIES: dict[str, str] = {
    "ttft_ms": "time_to_first_token",
    "tpot_ms": "inter_token_latency",
    "itl_ms": "inter_chunk_latency",
    "e2e_ms": "request_latency",
}
IDENTIFYING = ("request_latency", "request_throughput", "time_to_first_token", "request_count")
DEFINITIONS: tuple[str, ...] = (
    "AIPerf: its ITL (`inter_token_latency`) is (E2E - TTFT) / (output tokens - 1), the TPOT "
    "formula, and is shown on the tpot_ms rows (E2E to the end of the stream, where loadgen stops "
    "at the last token-bearing chunk).",
    "AIPerf: the per-chunk gaps loadgen calls ITL are its `inter_chunk_latency` (ICL), shown on "
    "the itl_ms rows when the file has them.",
    "AIPerf: TTFT counts reasoning tokens, as loadgen's does; its TTFO (first non-reasoning "
    "token) is not shown.",
    "AIPerf: output tokens are counted by its client-side tokenizer unless told to use the "
    "server's count; loadgen prefers the server's `usage`.",
    "AIPerf: throughput is over `benchmark_duration`, the first request's send to the last "
    "response; it reports no p99.9.",
)


def recognises(data: Any) -> bool:
    if not isinstance(data, dict) or ("schema_version" in data and "run_id" in data):
        return False
    tagged = [t for t in IDENTIFYING if isinstance(data.get(t), Mapping) and "unit" in data[t]]
    return bool(tagged) or isinstance(data.get("input_config"), Mapping)


def _value(data: Mapping[str, Any], tag: str) -> float | None:
    """A scalar metric: its ``avg`` (or a bare number, as some exports write counts)."""
    node = data.get(tag)
    return common.number(node.get("avg") if isinstance(node, Mapping) else node)


def _dist(data: Mapping[str, Any], tag: str, path: Path) -> dict[str, Any] | None:
    node = data.get(tag)
    if not isinstance(node, Mapping):
        return None
    unit = str(node.get("unit", "ms"))
    if unit not in common.MS_PER_UNIT:
        raise common.missing(path, TOOL, f"{tag}.unit (a time unit, got {unit!r})")
    stats = {"mean": node.get("avg"), "std": node.get("std"), "min": node.get("min"), "max": node.get("max")}
    stats.update({p: node.get(p) for p in ("p50", "p90", "p95", "p99")})
    return common.distribution(stats, common.MS_PER_UNIT[unit])


def load(data: Any, path: Path, name: str) -> tuple[Summary, str | None]:
    ok = _value(data, "request_count")
    if ok is None:
        raise common.missing(path, TOOL, "request_count")
    if not isinstance(data.get("request_latency"), Mapping):
        raise common.missing(path, TOOL, "request_latency")
    failed = _value(data, "error_request_count")
    if failed is None and isinstance(data.get("error_summary"), list):
        # error_request_count is only exported when some request failed
        failed = float(sum(common.number(e.get("count")) or 0 for e in data["error_summary"]))
    dists = {metric: _dist(data, tag, path) for metric, tag in LATENCIES.items()}
    for metric in ("ttft_ms", "e2e_ms"):
        if dists[metric] is not None:
            dists[metric] = {**dists[metric], "count": int(ok)}  # type: ignore[dict-item]
    duration = data.get("benchmark_duration")
    seconds = None
    if isinstance(duration, Mapping) and common.number(duration.get("avg")) is not None:
        seconds = float(duration["avg"]) * common.MS_PER_UNIT.get(str(duration.get("unit", "sec")), 1e3) / 1e3
    scalars = {
        "request_throughput_rps": _value(data, "request_throughput"),
        "output_tokens_per_s": _value(data, "output_token_throughput"),
    }
    block = common.measured(
        common.counts(None if failed is None else ok + failed, ok, failed),
        seconds,
        dists,
        scalars,
        _value(data, "goodput"),
    )
    cfg = data.get("input_config") or {}
    urls = common.get(cfg, "endpoint.urls")
    conditions = {
        "target": {
            "url": common.get(cfg, "endpoint.url") or (urls[0] if isinstance(urls, list) and urls else None),
            "endpoint": common.get(cfg, "endpoint.type"),
            "model": common.get(cfg, "endpoint.model_names.0"),
        },
        "load": {
            "concurrency": common.get(cfg, "loadgen.concurrency"),
            "rate": common.get(cfg, "loadgen.request_rate"),
        },
        "lengths": {
            "realised": {
                "server_prompt_tokens": _mean(data, "input_sequence_length", ok),
                "server_output_tokens": _mean(data, "output_sequence_length", ok),
            }
        },
    }
    summary = common.summary(
        name=name,
        block=block,
        conditions=conditions,
        started_at=common.iso(data.get("start_time")),
        ended_at=common.iso(data.get("end_time")),
    )
    return summary, data.get("aiperf_version")


def _mean(data: Mapping[str, Any], tag: str, ok: float) -> dict[str, Any] | None:
    mean = _value(data, tag)
    return None if mean is None else {"count": int(ok), "mean": mean}
