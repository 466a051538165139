"""The server's own view of a run: its Prometheus ``/metrics`` in one normalized form.

Each engine names the same facts differently; ``loadgen.server.engines`` maps each engine's
names onto one set of keys (``ENGINES``, re-exported here), ``detect_engine`` picks the map
from the names a server serves. Parsing is ``prometheus_client``'s, never a hand-written one.

A scrape becomes one flat row (``normalize``): gauges ``running``, ``waiting``,
``kv_cache_usage`` (0..1), counters ``preemptions_total``, ``prompt_tokens_total``,
``generation_tokens_total``, ``prefix_cache_queries_total`` and ``prefix_cache_hits_total``
(prompt tokens looked up in the prefix cache, and found), and ``<hist>_sum_s`` /
``<hist>_count`` of the latency histograms ``ttft``, ``itl``, ``tpot``, ``e2e`` and
``queue_time``; None where the engine has no such metric. Series with several label sets
(data-parallel engines, several models) are summed, except ``kv_cache_usage``, a fraction,
which is averaged. The run's scrapes become its ``server`` block (``summarize``).

trtllm-serve answers ``/metrics`` with JSON iteration statistics, not Prometheus text (its
Prometheus text is at ``/prometheus/metrics``); ``trtllm_json_row`` reads the gauges it has
(running, waiting, KV-cache blocks used / max). It has no latency histograms.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

# The client's means are client figures, computed in analysis; re-exported for the scraper.
from loadgen.analysis.client_means import client_means, client_vs_server
from loadgen.server.engines import COUNTERS, ENGINES, GAUGES, HISTOGRAMS, PER_POSITION, ROW_KEYS, EngineNames

__all__ = [
    "COUNTERS",
    "ENGINES",
    "GAUGES",
    "HISTOGRAMS",
    "ROW_KEYS",
    "EngineNames",
    "Samples",
    "client_means",
    "detect_engine",
    "metrics_labels",
    "normalize",
    "parse",
    "summarize",
    "trtllm_json_row",
]

# sample name -> [(labels, value), ...]
Samples = dict[str, list[tuple[dict[str, str], float]]]

# Labels that describe the server (the others split a series: le, finished_reason, source, ...).
_DESCRIPTIVE_LABELS = frozenset(
    {"model_name", "name", "model", "engine", "engine_type", "tp_rank", "pp_rank", "dp_rank", "moe_ep_rank"}
)


def parse(text: str | bytes) -> Samples:
    """Prometheus text exposition -> every sample's labels and value, keyed by sample name
    (``vllm:e2e_request_latency_seconds_sum``, ``vllm:prompt_tokens_total``, ...)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name].append((s.labels, float(s.value)))
    return dict(out)


def detect_engine(samples: Samples) -> str | None:
    """The engine whose names the samples use: sim (vLLM names plus the simulator's marker),
    vllm, sglang, trtllm or llamacpp; None when no known name is present."""
    names = samples.keys()
    if ENGINES["sim"].marker in names:
        return "sim"
    for engine in ("vllm", "sglang", "trtllm", "llamacpp"):
        wanted = set(ENGINES[engine].wanted())
        if any(n in wanted for n in names):
            return engine
    return None


def normalize(samples: Samples, engine: str) -> dict[str, Any]:
    """One scrape in loadgen's keys (see the module docstring); None for what it lacks; with
    ``PER_POSITION`` (a list) when the engine counts accepted draft tokens by position."""
    names = ENGINES[engine]
    row: dict[str, Any] = {}
    for key in GAUGES + COUNTERS:
        row[key] = _first(samples, names.scalars.get(key, ()), mean=key == "kv_cache_usage")
    for h in HISTOGRAMS:
        base = next((n for n in names.histograms.get(h, ()) if f"{n}_count" in samples), None)
        row[f"{h}_sum_s"] = _total(samples, f"{base}_sum") if base else None
        row[f"{h}_count"] = _total(samples, f"{base}_count") if base else None
    if names.accepted_per_position and names.accepted_per_position in samples:
        per: dict[int, float] = defaultdict(float)
        for labels, value in samples[names.accepted_per_position]:
            with contextlib.suppress(KeyError, ValueError):
                per[int(labels["position"])] += value
        row[PER_POSITION] = [per[k] for k in range(max(per) + 1)] if per else None
    return row


def metrics_labels(samples: Samples, engine: str | None) -> dict[str, Any]:
    """What the labels and config gauges of one scrape reveal of the engine's configuration:
    ``info`` (every ``*_info`` series of the engine, e.g. vLLM's ``cache_config_info`` with
    block_size, gpu_memory_utilization, num_gpu_blocks), ``config`` (config gauges such as
    SGLang's ``max_total_num_tokens``), ``labels`` (each descriptive label's distinct values
    across the engine's series: ``model_name``, ``engine``, ``tp_rank``, ...)."""
    if engine is None:
        return {"engine": None, "info": {}, "config": {}, "labels": {}}
    names = ENGINES[engine]
    info: dict[str, dict[str, str]] = {}
    values: dict[str, set[str]] = defaultdict(set)
    for name, series in samples.items():
        if not name.startswith(names.prefix):
            continue
        if name.endswith("_info") and series:
            info[name] = dict(series[0][0])
            continue
        for labels, _ in series:
            for k, v in labels.items():
                if k in _DESCRIPTIVE_LABELS:
                    values[k].add(v)
    config = {n: _total(samples, n) for n in names.config_gauges if n in samples}
    listed: dict[str, list[str]] = {k: sorted(v) for k, v in sorted(values.items())}
    return {"engine": engine, "info": info, "config": config, "labels": listed}


def trtllm_json_row(body: bytes) -> dict[str, float | None] | None:
    """trtllm-serve's JSON ``/metrics`` (iteration statistics since the last call, newest last)
    -> a row with the gauges it carries; None when it is not that (not JSON, or no iteration:
    the server drained nothing since the last call, or runs without iteration stats)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    stats = data if isinstance(data, list) else [data]
    last = next((s for s in reversed(stats) if isinstance(s, dict) and "numActiveRequests" in s), None)
    if last is None:
        return None
    row: dict[str, float | None] = dict.fromkeys(ROW_KEYS)
    row["running"] = _num(last.get("numActiveRequests"))
    row["waiting"] = _num(last.get("numQueuedRequests"))
    kv = last.get("kvCacheStats") or {}
    used, total = _num(kv.get("usedNumBlocks")), _num(kv.get("maxNumBlocks"))
    row["kv_cache_usage"] = used / total if used is not None and total else None
    return row


def _first(samples: Samples, names: Iterable[str], *, mean: bool = False) -> float | None:
    for n in names:
        if n in samples:
            return _total(samples, n, mean=mean)
    return None


def _total(samples: Samples, name: str, *, mean: bool = False) -> float | None:
    series = samples.get(name)
    if not series:
        return None
    total = sum(v for _, v in series)
    return total / len(series) if mean else total


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# ----------------------------------------------------------------------------- the run's view
def summarize(
    rows: Sequence[Mapping[str, Any]], window_ns: tuple[int, int] | None, client: Mapping[str, float | None]
) -> dict[str, Any]:
    """The run's ``server`` block from its scrapes (``rows``: ``t_ns`` plus ``ROW_KEYS``, in time
    order, the first taken before the load and the last after it).

    ``gauges``: mean and max of running, waiting and kv_cache_usage over the scrapes inside
    ``window_ns`` (the measured window; all scrapes when none falls inside). ``preemptions``,
    ``tokens``: counter deltas, last minus first scrape; ``prefix_cache`` (engines that count
    it): prompt tokens queried and hit, and the hit rate. ``histograms``: per histogram the deltas
    of count and sum and ``mean_ms`` = sum delta / count delta. ``client_vs_server``: the
    client's mean (``client``, from ``analysis.client_means``) minus the server's
    (``analysis.client_means.client_vs_server``; queueing inside the server is in both,
    ``histograms.queue_time`` says how much of it there was).
    """
    out: dict[str, Any] = {
        "gauges": {},
        "preemptions": None,
        "tokens": {},
        "histograms": {},
        "client_vs_server": {},
    }
    if not rows:
        return out
    inside = [r for r in rows if window_ns and window_ns[0] <= r["t_ns"] <= window_ns[1]] or list(rows)
    for g in GAUGES:
        vals = [r[g] for r in inside if r.get(g) is not None]
        out["gauges"][g] = (
            {"mean": sum(vals) / len(vals), "max": max(vals), "samples": len(vals)} if vals else None
        )
    first, last = rows[0], rows[-1]
    out["preemptions"] = _delta(first, last, "preemptions_total")
    out["tokens"] = {
        "prompt": _delta(first, last, "prompt_tokens_total"),
        "generation": _delta(first, last, "generation_tokens_total"),
    }
    queries, hits = (
        _delta(first, last, "prefix_cache_queries_total"),
        _delta(first, last, "prefix_cache_hits_total"),
    )
    if queries is not None and hits is not None:
        out["prefix_cache"] = {
            "queries": queries,
            "hits": hits,
            "hit_rate": hits / queries if queries > 0 else None,
        }
    busy = _busy(first, last, out["tokens"])
    if busy:
        out["engine_time"] = busy
    for h in HISTOGRAMS:
        count, total = _delta(first, last, f"{h}_count"), _delta(first, last, f"{h}_sum_s")
        if count is None or total is None:
            continue
        out["histograms"][h] = {
            "count": count,
            "sum_s": total,
            "mean_ms": total / count * 1e3 if count > 0 else None,
        }
    out["client_vs_server"] = client_vs_server(out["histograms"], client)
    return out


def _busy(first: Mapping, last: Mapping, tokens: Mapping[str, Any]) -> dict | None:
    """The engine's own prompt and generation seconds over the run, per token, and its decode
    calls (llama.cpp's counters); None for an engine without them."""
    prompt_s = _delta(first, last, "prompt_seconds_total")
    gen_s = _delta(first, last, "generation_seconds_total")
    if prompt_s is None and gen_s is None:
        return None

    def per_token_ms(seconds: float | None, n: Any) -> float | None:
        return seconds / n * 1e3 if seconds is not None and n else None

    return {
        "prompt_s": prompt_s,
        "generation_s": gen_s,
        "decode_calls": _delta(first, last, "decode_calls_total"),
        "prompt_ms_per_token": per_token_ms(prompt_s, tokens.get("prompt")),
        "generation_ms_per_token": per_token_ms(gen_s, tokens.get("generation")),
    }


def _delta(first: Mapping, last: Mapping, key: str) -> float | None:
    """last - first (an int when whole: counts), None when absent or when the counter went
    down (the server restarted during the run)."""
    a, b = first.get(key), last.get(key)
    if a is None or b is None or b < a:
        return None
    d = b - a
    return int(d) if float(d).is_integer() and not key.endswith("_s") and "seconds" not in key else d
