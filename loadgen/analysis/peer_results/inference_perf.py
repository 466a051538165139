"""inference-perf's lifecycle reports (inference_perf/reportgen/base.py, ``summarize_requests``;
read against the files inference-perf 0.7.0 writes, and the layout of its reports since 0.1).

A run writes ``summary_lifecycle_metrics.json`` (every stage's requests together, the tool's own
pooled figures) and one ``stage_<n>_lifecycle_metrics.json`` per stage into its storage path,
with the ``config.yaml`` it ran (``server.model_name``, ``server.base_url``, ``api.type``,
``load.type``). Each report has ``benchmark_time_seconds`` (0.7: the first send to the last
response), ``load_summary`` (``count`` sent; per stage ``requested_rate``, ``achieved_rate``,
``send_duration``, and ``concurrency`` for a concurrent stage, whose ``requested_rate`` is
derived, not asked for), ``successes`` (``count``, ``latency`` distributions in seconds,
``throughput``, ``prompt_tokens`` / ``output_tokens``: the server's usage counts, 0.7) and
``failures`` (``count``). A distribution: ``mean``, ``min``, ``max``, ``median`` and ``p0.1``
... ``p99.9`` (numpy's linear percentiles, as loadgen's). The files record no version of the
tool and no run name: the run is named by its folder, the storage path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from loadgen.analysis.peer_results import common
from loadgen.errors import ResultError
from loadgen.summary import Summary

TOOL = "inference-perf"
SUMMARY_FILE = "summary_lifecycle_metrics.json"
CONFIG_FILE = "config.yaml"
FILE_NAMES: tuple[str, ...] = (SUMMARY_FILE,)
STAGE_FILE = re.compile(r"^stage_(\d+)_lifecycle_metrics\.json$")
# loadgen metric <- inference-perf latency (seconds). Its TPOT is (last token - first token) /
# (output tokens - 1), loadgen's; its ITL is per token, which loadgen's per-chunk ITL is not.
LATENCIES: dict[str, str] = {
    "ttft_ms": "time_to_first_token",
    "tpot_ms": "time_per_output_token",
    "itl_ms": "inter_token_latency",
    "e2e_ms": "request_latency",
}
SCALARS: dict[str, str] = {
    "request_throughput_rps": "requests_per_sec",
    "output_tokens_per_s": "output_tokens_per_sec",
    "input_tokens_per_s": "input_tokens_per_sec",
    "total_tokens_per_s": "total_tokens_per_sec",
}
# loadgen realised length <- (inference-perf successes field, the fallback count that says how
# many requests the client counted instead of the server). 0.6 and before wrote prompt_len and
# output_len, client-tokenizer counts, which are not the server's and are not read.
LENGTHS: dict[str, tuple[str, str]] = {
    "server_prompt_tokens": ("prompt_tokens", "prompt"),
    "server_output_tokens": ("output_tokens", "output"),
}
STAT_KEYS: dict[str, str] = {
    "mean": "mean",
    "min": "min",
    "max": "max",
    "p50": "median",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "p99_9": "p99.9",
}
ENDPOINTS: dict[str, str] = {"completion": "completions", "chat": "chat"}
DEFINITIONS: tuple[str, ...] = (
    "inference-perf: ITL is per token: each chunk is re-tokenized and every token of a chunk "
    "gets the chunk's arrival time, so a chunk of n tokens gives one gap and n - 1 zeros; with "
    "one token per chunk it equals loadgen's per-chunk itl_ms, with several its percentiles fall.",
    "inference-perf: TTFT is stamped at the first chunk with answer text (`content` or `text`); "
    "reasoning deltas do not count, where loadgen's TTFT counts them.",
    "inference-perf: TPOT = (last token - first token) / (output tokens - 1), loadgen's formula; "
    "output tokens come from its client-side tokenizer unless it is told to use the server's "
    "(`use_server_output_tokens`); its NTPOT (E2E / output tokens) is not shown.",
    "inference-perf: throughput is over `benchmark_time_seconds`, the first send to the last "
    "response of the stage's requests, warm-up included; the summary's figures are its own, over "
    "every stage's requests together.",
)


def recognises(data: Any) -> bool:
    return isinstance(data, dict) and {"load_summary", "successes"} <= data.keys()


def _lengths(f: common.Fields, successes: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, (name, side) in LENGTHS.items():
        stats = f.stats(successes, name, STAT_KEYS, "successes.")
        fallbacks = f.number(successes, f"client_fallback_requests.{side}", "successes.")
        if stats is None or stats["mean"] is None or fallbacks:
            continue  # absent, or counted by the client for some request: not the server's
        count = f.number(successes, "count", "successes.")
        out[key] = {"count": count, **{k: v for k, v in stats.items() if v is not None}}
    return out


def _block(f: common.Fields, data: Mapping[str, Any]) -> dict[str, Any]:
    successes = f.need_map(data, "successes")
    sent = f.need(data, "load_summary.count")
    ok = f.need(successes, "count", "successes.")
    failed = f.need(data, "failures.count")
    latency = (
        f.need_map(successes, "latency", "successes.") if ok else f.mapping(successes, "latency")
    ) or {}
    dists: dict[str, dict[str, Any] | None] = {}
    for metric, name in LATENCIES.items():
        stats = f.stats(latency, name, STAT_KEYS, "successes.latency.")
        count = ok if metric in ("ttft_ms", "e2e_ms") else None
        dists[metric] = None if stats is None else common.distribution(stats, 1000.0, count)
    f.mapping(successes, "throughput", "successes.")
    scalars = {k: f.number(successes, f"throughput.{v}", "successes.") for k, v in SCALARS.items()}
    seconds = f.number(data, "benchmark_time_seconds")
    rps = scalars["request_throughput_rps"]
    if seconds is None and rps:
        seconds = ok / rps  # before 0.7: requests_per_sec is successes / that window, exactly
    goodput = f.number(successes, "goodput_metrics.request_goodput", "successes.")
    return common.measured(common.counts(sent, ok, failed), seconds, dists, scalars, goodput)


def _load(
    f: common.Fields, data: Mapping[str, Any], arrival: str | None
) -> tuple[str | None, dict[str, Any]]:
    """(stage name, loadgen-shaped load) of a report's ``load_summary``: a concurrent stage by
    its concurrency (its ``requested_rate`` is derived by the tool, not asked for), a rate
    stage by its rate with the arrival ``config.yaml`` names."""
    f.need_map(data, "load_summary")
    concurrency = f.number(data, "load_summary.concurrency")
    rate = f.number(data, "load_summary.requested_rate")
    achieved = f.number(data, "load_summary.achieved_rate")
    if concurrency is not None:
        load = {"concurrency": int(concurrency), "arrival": "closed loop", "achieved_rate": achieved}
        return f"c={int(concurrency)}", load
    load = {"rate": rate, "arrival": arrival, "achieved_rate": achieved}
    return (None if rate is None else f"rate={rate:g}"), load


def stage_files(folder: Path) -> list[Path]:
    """The ``stage_<n>_lifecycle_metrics.json`` files of a run's folder, in stage order."""
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := STAGE_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def _config(folder: Path) -> Mapping[str, Any]:
    """The ``config.yaml`` the run wrote beside its reports ({} when there is none)."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        cfg = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ResultError(f"{path}: the run's {CONFIG_FILE} cannot be read ({exc})") from None
    if not isinstance(cfg, Mapping):
        raise ResultError(f"{path}: the run's {CONFIG_FILE} is not a mapping of settings")
    return cfg


def load(data: Any, path: Path, name: str) -> tuple[Summary, str | None]:
    f = common.Fields(path, TOOL)
    block = _block(f, data)
    cfg = _config(path.parent)
    c = common.Fields(path.parent / CONFIG_FILE, TOOL)
    arrival = c.text(cfg, "load.type")
    stages = []
    if path.name == SUMMARY_FILE:
        for i, stage_path in enumerate(stage_files(path.parent)):
            stage_data = common.read_json(stage_path)
            s = common.Fields(stage_path, TOOL)
            if not recognises(stage_data):
                raise s.missing("load_summary")
            stage_name, stage_load = _load(s, stage_data, arrival)
            stages.append(
                common.stage(i, stage_name or stage_path.stem, stage_load, _block(s, stage_data), TOOL)
            )
    own_load = _load(f, data, arrival)[1]
    conditions = {
        "target": {
            "url": c.text(cfg, "server.base_url"),
            "endpoint": ENDPOINTS.get(c.text(cfg, "api.type") or ""),
            "model": c.text(cfg, "server.model_name"),
        },
        "load": own_load if len(stages) < 2 else {"stages": [s["name"] for s in stages]},
        "lengths": {"realised": _lengths(f, f.need_map(data, "successes"))},
    }
    return common.summary(name=name, block=block, conditions=conditions, stages=stages), None
