"""AIPerf's ``profile_export_aiperf.json`` (aiperf/exporters/json_exporter.py; read against the
files AIPerf 0.13.0 writes, ``schema_version`` "1.4", and the layout of 0.12 and before).

One object per run: each metric under its tag (``time_to_first_token``, ``inter_token_latency``,
``inter_chunk_latency``, ``request_latency``, ``request_throughput``, ``request_count``, ...)
as ``{unit, avg, min, max, std, p1 ... p99, count}`` in its display unit, ``aiperf_version``,
``benchmark_id`` and the run's ``input_config``: 0.13 writes ``models.items[].name`` and
``phases[]`` (``type`` concurrency / poisson / gamma / constant, ``concurrency``, ``rate``),
0.12 wrote ``endpoint.model_names`` and ``loadgen``. A metric AIPerf could not compute (no
streaming, no errors) is left out of the file. Which tag fills which row: ``LATENCIES``,
``SCALARS`` and docs/peers.md.
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
# loadgen scalar <- AIPerf tag (its ``avg``). effective_concurrency (0.13) is the time-weighted
# number of requests in flight, loadgen's mean_concurrency.
SCALARS: dict[str, str] = {
    "request_throughput_rps": "request_throughput",
    "output_tokens_per_s": "output_token_throughput",
    "input_tokens_per_s": "input_token_throughput",
    "total_tokens_per_s": "total_token_throughput",
    "mean_concurrency": "effective_concurrency",
}
# loadgen realised length <- AIPerf tags: the server's usage counts (0.13), else its sequence
# lengths when it was told to use the server's count (``use_server_token_count``).
LENGTHS: dict[str, tuple[str, str]] = {
    "server_prompt_tokens": ("usage_prompt_tokens", "input_sequence_length"),
    "server_output_tokens": ("usage_completion_tokens", "output_sequence_length"),
}
STAT_KEYS: dict[str, str] = {
    "mean": "avg",
    "std": "std",
    "min": "min",
    "max": "max",
    "p50": "p50",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
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
    "server's count (`--use-server-token-count`); loadgen prefers the server's `usage`, and its "
    "realised lengths are read from AIPerf's `usage_*` tags only.",
    "AIPerf: throughput is over `benchmark_duration`, the first request's send to the last "
    "response; mean_concurrency is its `effective_concurrency`; it reports no p99.9.",
)


def recognises(data: Any) -> bool:
    if not isinstance(data, dict) or ("schema_version" in data and "run_id" in data):
        return False
    tagged = [t for t in IDENTIFYING if isinstance(data.get(t), Mapping) and "unit" in data[t]]
    return bool(tagged) or isinstance(data.get("input_config"), Mapping)


def _value(f: common.Fields, data: Mapping[str, Any], tag: str) -> float | None:
    """A scalar metric: its ``avg`` (or a bare number, as some exports write counts)."""
    if isinstance(data.get(tag), Mapping):
        return f.number(data, f"{tag}.avg")
    return f.number(data, tag)


def _unit(f: common.Fields, node: Mapping[str, Any], tag: str, default: str) -> float:
    unit = f.text(node, "unit", f"{tag}.") or default
    if unit not in common.MS_PER_UNIT:
        raise f.error(f"{tag}.unit", f"is not a time unit (got {unit!r})")
    return common.MS_PER_UNIT[unit]


def _dist(f: common.Fields, data: Mapping[str, Any], tag: str, ok: float) -> dict[str, Any] | None:
    node = f.mapping(data, tag)
    if node is None:
        return None
    stats = f.stats(data, tag, STAT_KEYS) or {}
    count = f.number(node, "count", f"{tag}.")
    if count is None and tag in (LATENCIES["ttft_ms"], LATENCIES["e2e_ms"]):
        count = ok  # 0.12 wrote no count: one sample per ok request
    return common.distribution(stats, _unit(f, node, tag, "ms"), count)


def _lengths(f: common.Fields, data: Mapping[str, Any], cfg: Any) -> dict[str, Any]:
    server_count = common.get(cfg, "endpoint.use_server_token_count") is True
    out: dict[str, Any] = {}
    for key, (usage, sequence) in LENGTHS.items():
        tag = usage if f.mapping(data, usage) is not None else sequence if server_count else None
        stats = f.stats(data, tag, STAT_KEYS) if tag else None
        if stats is not None and stats["mean"] is not None:
            out[key] = {
                "count": f.number(data, f"{tag}.count"),
                **{k: v for k, v in stats.items() if v is not None},
            }
    return out


def _load(f: common.Fields, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The profiling phase's load (0.13 ``phases``), or 0.12's ``loadgen`` section."""
    phases = f.items(cfg, "phases", "input_config.") or []
    for i, phase in enumerate(phases):
        where = f"input_config.phases.{i}."
        if f.text(phase, "kind", where) not in (None, "profiling"):
            continue
        kind = f.text(phase, "type", where)
        concurrency = f.number(phase, "concurrency", where)
        if kind == "concurrency" and concurrency is not None:
            return {"concurrency": int(concurrency), "arrival": "closed loop"}
        return {"rate": f.number(phase, "rate", where), "arrival": kind, "max_concurrency": concurrency}
    concurrency = f.number(cfg, "loadgen.concurrency", "input_config.")
    rate = f.number(cfg, "loadgen.request_rate", "input_config.")
    if rate is None and concurrency is not None:
        return {"concurrency": int(concurrency), "arrival": "closed loop"}
    return {"concurrency": concurrency, "rate": rate}


def load(data: Any, path: Path, name: str) -> tuple[Summary, str | None]:
    f = common.Fields(path, TOOL)
    ok = _value(f, data, "request_count")
    if ok is None:
        raise f.missing("request_count")
    f.need_map(data, "request_latency")
    failed = _value(f, data, "error_request_count")
    errors = f.items(data, "error_summary")
    if failed is None and errors is not None:
        # error_request_count is only exported when some request failed
        failed = sum(f.number(e, "count", f"error_summary.{i}.") or 0 for i, e in enumerate(errors))
    sent = _value(f, data, "completed_request_count")  # successes + errors (0.13)
    dists = {metric: _dist(f, data, tag, ok) for metric, tag in LATENCIES.items()}
    duration = f.mapping(data, "benchmark_duration")
    seconds = None
    if duration is not None and (avg := f.number(duration, "avg", "benchmark_duration.")) is not None:
        seconds = avg * _unit(f, duration, "benchmark_duration", "sec") / 1e3
    scalars = {metric: _value(f, data, tag) for metric, tag in SCALARS.items()}
    block = common.measured(
        common.counts(sent if sent is not None else None if failed is None else ok + failed, ok, failed),
        seconds,
        dists,
        scalars,
        _value(f, data, "goodput"),
    )
    cfg = f.mapping(data, "input_config") or {}
    urls = f.items(cfg, "endpoint.urls", "input_config.")
    conditions = {
        "target": {
            "url": f.text(cfg, "endpoint.url", "input_config.") or (str(urls[0]) if urls else None),
            "endpoint": f.text(cfg, "endpoint.type", "input_config."),
            "model": f.text(cfg, "models.items.0.name", "input_config.")
            or f.text(cfg, "endpoint.model_names.0", "input_config."),
        },
        "load": _load(f, cfg),
        "lengths": {"realised": _lengths(f, data, cfg)},
    }
    summary = common.summary(
        name=name,
        block=block,
        conditions=conditions,
        started_at=common.iso(f.text(data, "start_time")),
        ended_at=common.iso(f.text(data, "end_time")),
        run_id=f.text(data, "benchmark_id"),
    )
    return summary, f.text(data, "aiperf_version")
