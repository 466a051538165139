"""vLLM's ``vllm bench serve --save-result`` JSON (vllm/benchmarks/serve.py; read against the
keys vLLM 0.19 to 0.34 write, stable since the script was ``benchmark_serving.py``).

One flat object per run: ``completed``, ``failed``, ``duration`` (s), ``request_throughput``,
``output_throughput``, ``total_token_throughput``, ``total_input_tokens``,
``total_output_tokens``, ``label`` (``--label``, the run's name when given), and per latency
``mean_/median_/std_/pNN_{ttft,tpot,itl,e2el}_ms`` (which ones: ``--percentile-metrics``, by
default ttft, tpot and itl; which percentiles: ``--metric-percentiles``, by default 99).
``--append-result`` appends one object per line to the same file: each line is a load point
(a stage of the comparison's curve). The file records no version of vLLM.
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
    "else the generated text re-tokenized with `--tokenizer`. Input tokens (`total_input_tokens`, "
    "so `input_tokens_per_s` = total_input_tokens / duration): since vLLM 0.20 the server's "
    "`usage.prompt_tokens` of each request, with the openai and openai-chat backends alike, "
    "falling back to the dataset's target length when the server sends no usage; before 0.20 "
    "always the dataset's target lengths. The file does not record which vLLM wrote it.",
    "vLLM bench serve: `duration` runs from the first request's dispatch to the last response; "
    "latencies are measured from when a request was sent, after any wait for `--max-concurrency` "
    "(so `--request-rate inf --max-concurrency N` is a closed loop of N).",
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


def _stats(f: common.Fields, d: dict[str, Any], name: str, where: str) -> dict[str, Any] | None:
    keys = {
        "mean": f"mean_{name}_ms",
        "std": f"std_{name}_ms",
        "p50": f"median_{name}_ms",
        "p90": f"p90_{name}_ms",
        "p95": f"p95_{name}_ms",
        "p99": f"p99_{name}_ms",
        "p99_9": f"p99.9_{name}_ms",
    }
    stats = {mine: f.number(d, theirs, where) if theirs in d else None for mine, theirs in keys.items()}
    if stats["p50"] is None and f"p50_{name}_ms" in d:
        stats["p50"] = f.number(d, f"p50_{name}_ms", where)
    return stats if any(v is not None for v in stats.values()) else None


def _block(f: common.Fields, d: dict[str, Any], where: str) -> dict[str, Any]:
    completed = f.need(d, "completed", where)
    duration = f.need(d, "duration", where)
    failed = f.number(d, "failed", where)  # vLLM before 0.11 wrote no failed count
    prompts = f.number(d, "num_prompts", where)
    sent = completed + failed if failed is not None else prompts
    dists: dict[str, dict[str, Any] | None] = {}
    for metric, name in LATENCIES.items():
        stats = _stats(f, d, name, where)
        count = completed if metric in ("ttft_ms", "e2e_ms") else None
        dists[metric] = None if stats is None else common.distribution(stats, count=count)
    total_input = f.number(d, "total_input_tokens", where)
    scalars = {
        "request_throughput_rps": f.need(d, "request_throughput", where),
        "output_tokens_per_s": f.number(d, "output_throughput", where),
        "total_tokens_per_s": f.number(d, "total_token_throughput", where),
        "input_tokens_per_s": total_input / duration if total_input is not None and duration else None,
    }
    goodput = f.number(d, "request_goodput", where)
    return common.measured(common.counts(sent, completed, failed), duration, dists, scalars, goodput)


def _load(f: common.Fields, d: dict[str, Any], where: str) -> dict[str, Any]:
    rate = None if d.get("request_rate") in ("inf", None) else f.number(d, "request_rate", where)
    cap = f.number(d, "max_concurrency", where)
    if rate is None:
        # Every request queued at time 0 behind a semaphore of max_concurrency, each timed from
        # when it passed: a closed loop of max_concurrency users; without a cap, all at once.
        if cap is not None:
            return {"concurrency": int(cap), "arrival": "closed loop"}
        return {"arrival": "all at once"}
    burst = f.number(d, "burstiness", where)
    arrival = "poisson" if burst in (None, 1.0) else "gamma"
    # burstiness shapes gamma arrivals only; the cap bounds requests in flight
    return {
        "rate": rate,
        "arrival": arrival,
        "burstiness": burst if arrival == "gamma" else None,
        "max_concurrency": None if cap is None else int(cap),
    }


def _stage_name(load: dict[str, Any]) -> str:
    if load.get("rate") is not None:
        return f"rate={load['rate']:g}"
    return f"c={load['concurrency']}" if load.get("concurrency") is not None else "rate=inf"


def load(data: Any, path: Path, name: str) -> tuple[Summary, str | None]:
    """(the file's summary, the tool's version: not recorded in the file)."""
    items: list[dict[str, Any]] = data if isinstance(data, list) else [data]
    f = common.Fields(path, TOOL)
    wheres = [f"line {i + 1}: " if len(items) > 1 else "" for i in range(len(items))]
    blocks = [_block(f, d, w) for d, w in zip(items, wheres)]
    loads = [_load(f, d, w) for d, w in zip(items, wheres)]
    first = items[0]
    backend = f.text(first, "backend") or f.text(first, "endpoint_type")
    conditions = {
        "target": {
            "endpoint": ENDPOINTS.get(backend or "", backend),
            "model": f.text(first, "model_id"),
        },
        "load": loads[0] if len(items) == 1 else {"stages": [_stage_name(ld) for ld in loads]},
        "lengths": {"realised": _lengths(f, items, wheres)},
    }
    stages = [common.stage(i, _stage_name(ld), ld, b, TOOL) for i, (ld, b) in enumerate(zip(loads, blocks))]
    if len(blocks) == 1:
        block = blocks[0]
    else:  # TTFT and E2E have one sample per completed request: their means pool exactly
        completed = [b["counts"]["ok"] for b in blocks]
        block = common.pooled(blocks, {"ttft_ms": completed, "e2e_ms": completed})
    summary = common.summary(
        name=name,
        block=block,
        conditions=conditions,
        stages=stages,
        ended_at=f.text(first, "date"),  # local time, "%Y%m%d-%H%M%S", when the run ended
    )
    return summary, None


def _lengths(f: common.Fields, items: list[dict[str, Any]], wheres: list[str]) -> dict[str, Any]:
    """The realised lengths' means (a total over the completed requests), over every line."""
    out: dict[str, Any] = {}
    for key, total_key in (
        ("server_prompt_tokens", "total_input_tokens"),
        ("server_output_tokens", "total_output_tokens"),
    ):
        totals = [f.number(d, total_key, w) for d, w in zip(items, wheres)]
        n = sum(f.need(d, "completed", w) for d, w in zip(items, wheres))
        if n and all(t is not None for t in totals):
            out[key] = {"count": int(n), "mean": sum(t or 0 for t in totals) / n}
    return out


def run_label(data: Any) -> str | None:
    """The run's name as vLLM records it: ``label`` (``--label``), when the first line has one."""
    first = data[0] if isinstance(data, list) and data else data
    label = first.get("label") if isinstance(first, dict) else None
    return label if isinstance(label, str) and label else None
