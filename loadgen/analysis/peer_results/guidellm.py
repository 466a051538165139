"""GuideLLM's ``benchmarks.json`` (``GenerativeBenchmarksReport``, guidellm
src/guidellm/benchmark/schemas/report.py; report ``metadata.version`` 2, read against the files
GuideLLM 0.8.1 writes).

``benchmarks[]`` holds one benchmark per load point (a sweep: synchronous, throughput, then
constant rates between them); each has ``config.strategy`` (``type_``, ``rate``, ``streams``,
``max_concurrency``), ``config.run_id``, ``config.backend`` (``target``, ``model``),
``duration`` (s), ``start_time`` / ``end_time`` (Unix s) and ``metrics``, whose distributions
are split by status (``successful``, ``errored``, ``incomplete``, ``total``), each with
``mean``, ``median``, ``std_dev``, ``min``, ``max``, ``count``, ``total_sum`` and
``percentiles`` (``p50`` ... ``p99``, ``p999``). Only ``successful`` figures are read, as
loadgen's latencies are over ok requests.

Each benchmark is a stage of the comparison. The whole file (a sweep's pooled row) has what
pools exactly: the counts, the sum of the windows, every rate over that sum, and each latency's
mean (``total_sum`` / ``count`` over all benchmarks); its percentiles stay per stage, since
percentiles measured at different loads do not pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
# loadgen scalar <- GuideLLM metric (its ``successful.mean``: ok requests over the window).
SCALARS: dict[str, str] = {
    "request_throughput_rps": "requests_per_second",
    "output_tokens_per_s": "output_tokens_per_second",
    "input_tokens_per_s": "prompt_tokens_per_second",
    "total_tokens_per_s": "tokens_per_second",
    "mean_concurrency": "request_concurrency",
}
LENGTHS: dict[str, str] = {
    "server_prompt_tokens": "prompt_token_count",
    "server_output_tokens": "output_token_count",
}
STAT_KEYS: dict[str, str] = {
    "mean": "mean",
    "std": "std_dev",
    "min": "min",
    "max": "max",
    "p50": "percentiles.p50",
    "p90": "percentiles.p90",
    "p95": "percentiles.p95",
    "p99": "percentiles.p99",
    "p99_9": "percentiles.p999",
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
    "timestamps come from `time.time()`, and its rates are over the benchmark's measured window "
    "(warm-up and cool-down excluded).",
    "GuideLLM: a file of several benchmarks has each as a stage; its whole-file row pools what "
    "pools exactly (counts, rates over the summed windows, latency means) and leaves the "
    "percentiles per stage.",
)


def recognises(data: Any) -> bool:
    return (
        isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and "schema_version" not in data
    )


def _successful(f: common.Fields, m: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any] | None:
    f.mapping(m, name, where)
    return f.mapping(m, f"{name}.successful", where)


def _mean(f: common.Fields, m: Mapping[str, Any], name: str, where: str) -> float | None:
    node = _successful(f, m, name, where)
    return None if node is None else f.number(node, "mean", f"{where}{name}.successful.")


def _block(
    f: common.Fields, b: Mapping[str, Any], where: str
) -> tuple[dict[str, Any], dict[str, float | None]]:
    """(the benchmark's block, {latency metric: its number of samples}) for pooling."""
    m = f.need_map(b, "metrics", where)
    at = where + "metrics."
    totals = f.need_map(m, "request_totals", at)
    ok = f.need(totals, "successful", at + "request_totals.")
    failed = f.number(totals, "errored", at + "request_totals.")
    incomplete = f.number(totals, "incomplete", at + "request_totals.") or 0
    sent = f.number(totals, "total", at + "request_totals.")
    dists: dict[str, dict[str, Any] | None] = {}
    samples: dict[str, float | None] = {}
    for metric, (name, scale) in LATENCIES.items():
        node = _successful(f, m, name, at)
        count = None if node is None else f.number(node, "count", f"{at}{name}.successful.")
        stats = f.stats(m, f"{name}.successful", STAT_KEYS, at) if count else None
        if stats is not None and stats["p50"] is None:
            stats["p50"] = f.number(node, "median", f"{at}{name}.successful.")
        # ITL samples are tokens, not requests: its count is no row of loadgen's
        dists[metric] = (
            None
            if stats is None
            else common.distribution(stats, scale, count if metric != "tpot_ms" else None)
        )
        samples[metric] = count
    scalars = {k: _mean(f, m, v, at) for k, v in SCALARS.items()}
    seconds = f.number(b, "duration", where)
    if seconds is None:
        start, end = f.number(b, "start_time", where), f.number(b, "end_time", where)
        seconds = end - start if start is not None and end is not None else None
    block = common.measured(
        common.counts(sent, ok, failed, incomplete),
        seconds,
        dists,
        scalars,
        _mean(f, m, "request_goodput", at),
    )
    return block, samples


def _load(f: common.Fields, b: Mapping[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """(stage name, loadgen-shaped load) of a benchmark's scheduling strategy."""
    s = f.mapping(b, "config.strategy", where) or {}
    at = where + "config.strategy."
    kind = f.text(s, "type_", at) or f.text(s, "type", at) or "unknown"
    rate, streams, cap = (f.number(s, k, at) for k in ("rate", "streams", "max_concurrency"))
    if kind == "synchronous":
        return kind, {"concurrency": 1, "arrival": "closed loop"}
    if kind == "concurrent" and streams is not None:
        return f"c={int(streams)}", {"concurrency": int(streams), "arrival": "closed loop"}
    if rate is not None:
        return f"{kind}@{rate:.4g}", {"rate": rate, "arrival": kind, "max_concurrency": cap}
    return kind, {"max_concurrency": None if cap is None else int(cap), "arrival": kind}


def _lengths(f: common.Fields, benchmarks: Sequence[Any]) -> dict[str, Any]:
    """The realised lengths: one benchmark's whole distribution; over several, the pooled mean
    (exact from each one's total_sum and count) and no percentile."""
    out: dict[str, Any] = {}
    for key, name in LENGTHS.items():
        parts = []
        for i, b in enumerate(benchmarks):
            stats = f.stats(b, f"metrics.{name}.successful", STAT_KEYS, f"benchmarks.{i}.")
            parts.append((stats, f.number(b, f"metrics.{name}.successful.count", f"benchmarks.{i}.")))
        if any(stats is None or stats["mean"] is None for stats, _ in parts):
            continue
        if len(parts) == 1:
            stats, n = parts[0]
            out[key] = {"count": n, **{k: v for k, v in (stats or {}).items() if v is not None}}
        else:
            mean = common.pooled_mean([((s or {}).get("mean"), n) for s, n in parts])
            counts = [n for _, n in parts]
            out[key] = None if mean is None else {"count": sum(n or 0 for n in counts), "mean": mean}
    return out


def load(data: Any, path: Path, name: str) -> tuple[Summary, str | None]:
    f = common.Fields(path, TOOL)
    benchmarks = f.items(data, "benchmarks") or []
    if not benchmarks:
        raise f.missing("benchmarks.0")
    blocks, samples, stages = [], [], []
    for i, b in enumerate(benchmarks):
        if not isinstance(b, Mapping):
            raise f.error(f"benchmarks.{i}", "is not an object")
        block, n = _block(f, b, f"benchmarks.{i}.")
        stage_name, stage_load = _load(f, b, f"benchmarks.{i}.")
        blocks.append(block)
        samples.append(n)
        stages.append(common.stage(i, stage_name, stage_load, block, TOOL))
    first = benchmarks[0]
    backend = f.mapping(first, "config.backend", "benchmarks.0.") or {}
    conditions = {
        "target": {
            "url": f.text(backend, "target", "benchmarks.0.config.backend."),
            "model": f.text(backend, "model", "benchmarks.0.config.backend."),
        },
        "load": _load(f, first, "benchmarks.0.")[1]
        if len(benchmarks) == 1
        else {"stages": [s["name"] for s in stages]},
        "lengths": {"realised": _lengths(f, benchmarks)},
    }
    if len(blocks) == 1:
        block = blocks[0]
    else:
        block = common.pooled(blocks, {m: [n[m] for n in samples] for m in LATENCIES})
    summary = common.summary(
        name=name,
        block=block,
        conditions=conditions,
        stages=stages,
        started_at=common.iso(f.number(first, "start_time", "benchmarks.0.")),
        ended_at=common.iso(f.number(benchmarks[-1], "end_time", f"benchmarks.{len(benchmarks) - 1}.")),
        run_id=f.text(first, "config.run_id", "benchmarks.0."),
    )
    return summary, f.text(data, "metadata.guidellm_version")
