"""vLLM's ``vllm bench serve --save-result`` JSON (vllm/benchmarks/serve.py; read against vLLM
0.32, whose keys have been stable since the script was ``benchmark_serving.py``).

One flat object per run: ``completed``, ``failed``, ``duration`` (s), ``request_throughput``,
``output_throughput``, ``total_token_throughput``, ``total_input_tokens``, and per latency
``mean_/median_/std_/pNN_{ttft,tpot,itl,e2el}_ms`` (which ones: ``--percentile-metrics``, by
default ttft, tpot and itl; which percentiles: ``--metric-percentiles``, by default 99).
``--append-result`` appends one object per line to the same file: each line is a load point
(a stage of the comparison's curve).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from loadgen.analysis.peer_results import common
from loadgen.summary import Summary

TOOL = "vllm bench serve"
FILE_NAMES: tuple[str, ...] = ()  # its file is named after the run: {label}-{rate}qps-...json
LATENCY_KEY = re.compile(r"^(mean|median|std|p\d+(\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
# loadgen metric <- vLLM's name in its keys. vLLM's TPOT and ITL match loadgen's TPOT and ITL.
LATENCIES: dict[str, str] = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"}
ENDPOINTS: dict[str, str] = {"openai-chat": "chat", "openai": "completions", "vllm": "completions"}
DEFINITIONS: tuple[str, ...] = (
    "vLLM bench serve: TTFT is stamped at the first streamed event with a non-empty `choices` list; "
    "with `--backend openai-chat` that can be the role-only first delta, sent before prefill ends, "
    "so its TTFT can be smaller than loadgen's (which waits for the first token-bearing event) and "
    "its first ITL gap larger.",
    "vLLM bench serve: ITL is the gap between consecutive streamed chunks, pooled over requests, the "
    "first token excluded (as loadgen's per-chunk `itl_ms`).",
    "vLLM bench serve: TPOT = (E2E - TTFT) / (output tokens - 1), from the end of the stream rather "
    "than loadgen's last token-bearing chunk; requests of one output token are left out.",
    "vLLM bench serve: output tokens are the server's `usage` count when the backend returns one, "
    "else the generated text re-tokenized with `--tokenizer`; input tokens are the prompt lengths "
    "the dataset targeted (`input_tokens_per_s` = total_input_tokens / duration).",
    "vLLM bench serve: `duration` runs from the first request's dispatch to the last response; "
    "latencies are measured from when a request was sent, after any wait for `--max-concurrency`.",
    "vLLM bench serve: goodput (`request_goodput`) counts requests meeting its `--goodput` SLOs, "
    "which the result file does not record.",
)


def recognises(data: Any) -> bool:
    """A flat object with the result's identifying keys, or lines of such (``--append-result``)."""
    items = data if isinstance(data, list) and data else [data]
    return all(isinstance(d, dict) and _looks_like(d) for d in items)


def _looks_like(d: dict[str, Any]) -> bool:
    if "schema_version" in d:
        return False
    if any(LATENCY_KEY.match(k) for k in d):
        return True
    return {"num_prompts", "request_throughput"} <= d.keys() or {"endpoint_type", "num_prompts"} <= d.keys()


def _stats(d: dict[str, Any], name: str) -> dict[str, Any] | None:
    stats = {
        "mean": d.get(f"mean_{name}_ms"),
        "std": d.get(f"std_{name}_ms"),
        "p50": d.get(f"median_{name}_ms", d.get(f"p50_{name}_ms")),
        "p90": d.get(f"p90_{name}_ms"),
        "p95": d.get(f"p95_{name}_ms"),
        "p99": d.get(f"p99_{name}_ms"),
        "p99_9": d.get(f"p99.9_{name}_ms"),
        "min": None,
        "max": None,
    }
    return stats if any(common.number(v) is not None for v in stats.values()) else None


def _block(d: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    completed = common.need(d, "completed", path, TOOL, where)
    duration = common.need(d, "duration", path, TOOL, where)
    failed = common.number(d.get("failed"))  # vLLM before 0.11 wrote no failed count
    prompts = common.number(d.get("num_prompts"))
    sent = completed + failed if failed is not None else prompts
    dists: dict[str, dict[str, Any] | None] = {}
    for metric, name in LATENCIES.items():
        stats = _stats(d, name)
        count = completed if metric in ("ttft_ms", "e2e_ms") else None
        dists[metric] = None if stats is None else common.distribution(stats, count=count)
    total_input = common.number(d.get("total_input_tokens"))
    scalars = {
        "request_throughput_rps": common.need(d, "request_throughput", path, TOOL, where),
        "output_tokens_per_s": common.number(d.get("output_throughput")),
        "total_tokens_per_s": common.number(d.get("total_token_throughput")),
        "input_tokens_per_s": total_input / duration if total_input is not None and duration else None,
    }
    goodput = common.number(d.get("request_goodput"))
    return common.measured(common.counts(sent, completed, failed), duration, dists, scalars, goodput)


def _load(d: dict[str, Any]) -> dict[str, Any]:
    rate = common.number(d.get("request_rate"))  # "inf": every request at once
    cap = common.number(d.get("max_concurrency"))
    if rate is None:
        # All requests queued at time 0 behind a semaphore of max_concurrency: a closed loop.
        return {"concurrency": None if cap is None else int(cap), "rate": None, "arrival": "all at once"}
    burst = common.number(d.get("burstiness"))
    arrival = "poisson" if burst in (None, 1.0) else "gamma"
    return {
        "concurrency": None,
        "rate": rate,
        "arrival": arrival,
        "burstiness": burst,
        "max_concurrency": cap,
    }


def _stage_name(load: dict[str, Any]) -> str:
    if load["rate"] is not None:
        return f"rate={load['rate']:g}"
    return f"c={load['concurrency']}" if load["concurrency"] is not None else "rate=inf"


def load(data: Any, path: Path, name: str) -> tuple[Summary, str | None]:
    """(the file's summary, the tool's version: not recorded in the file)."""
    items: list[dict[str, Any]] = data if isinstance(data, list) else [data]
    blocks = [_block(d, path, f"line {i + 1}: " if len(items) > 1 else "") for i, d in enumerate(items)]
    first = items[0]
    conditions = {
        "target": {
            "url": None,
            "endpoint": ENDPOINTS.get(str(first.get("backend")), first.get("backend")),
            "model": first.get("model_id"),
        },
        "load": _load(first),
        "lengths": {"realised": {"server_prompt_tokens": _mean(first, "total_input_tokens")}},
    }
    stages = [
        common.stage(i, _stage_name(_load(d)), _load(d), b, TOOL)
        for i, (d, b) in enumerate(zip(items, blocks))
    ]
    block = blocks[0] if len(blocks) == 1 else common.pooled(blocks)
    started = first.get("date")  # local time, "%Y%m%d-%H%M%S", when the run ended
    summary = common.summary(
        name=name, block=block, conditions=conditions, stages=stages, ended_at=common.iso(started)
    )
    return summary, None


def _mean(d: dict[str, Any], total_key: str) -> dict[str, Any] | None:
    total, n = common.number(d.get(total_key)), common.number(d.get("completed"))
    return {"count": int(n), "mean": total / n} if total is not None and n else None
