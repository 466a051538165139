"""inference-perf's lifecycle reports (inference_perf/reportgen/base.py, ``summarize_requests``;
the layout of its reports since 0.1, as in the repository's demos/ results).

A run writes ``summary_lifecycle_metrics.json`` (every stage's requests together) and one
``stage_<n>_lifecycle_metrics.json`` per stage into one folder. Each has ``load_summary``
(``count`` sent; per stage ``requested_rate``, ``achieved_rate``, ``send_duration``),
``successes`` (``count``, ``latency`` distributions in seconds, ``throughput``, ``prompt_len``,
``output_len``) and ``failures`` (``count``). A distribution: ``mean``, ``min``, ``max``,
``median`` and ``p0.1`` ... ``p99.9`` (numpy's linear percentiles, as loadgen's). Given the
folder or its summary, the stage files beside it are the stages of the comparison.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.analysis.peer_results import common
from loadgen.summary import Summary

TOOL = "inference-perf"
SUMMARY_FILE = "summary_lifecycle_metrics.json"
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
DEFINITIONS: tuple[str, ...] = (
    "inference-perf: ITL is per token: each chunk is re-tokenized and every token of a chunk "
    "gets the chunk's arrival time, so a chunk of n tokens gives one gap and n - 1 zeros; with "
    "one token per chunk it equals loadgen's per-chunk itl_ms, with several its percentiles fall.",
    "inference-perf: TTFT is stamped at the first chunk with answer text (`content` or `text`); "
    "reasoning deltas do not count, where loadgen's TTFT counts them.",
    "inference-perf: TPOT = (last token - first token) / (output tokens - 1), loadgen's formula; "
    "output tokens come from its client-side tokenizer unless it is told to use the server's; "
    "its NTPOT (E2E / output tokens) is not shown.",
    "inference-perf: throughput is over the first send to the last response of the stage's "
    "requests, warm-up included (the window's length is successes / requests_per_sec).",
)


def recognises(data: Any) -> bool:
    return isinstance(data, dict) and {"load_summary", "successes"} <= data.keys()


def _stats(d: Mapping[str, Any]) -> dict[str, Any]:
    keys = {"mean": "mean", "min": "min", "max": "max", "p50": "median", "p90": "p90", "p95": "p95"}
    keys.update({"p99": "p99", "p99_9": "p99.9"})
    return {mine: d.get(theirs) for mine, theirs in keys.items()}


def _block(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    successes = common.need_map(data, "successes", path, TOOL)
    sent = common.need(data, "load_summary.count", path, TOOL)
    ok = common.need(successes, "count", path, TOOL, "successes.")
    failed = common.need(data, "failures.count", path, TOOL)
    latency = common.need_map(successes, "latency", path, TOOL, "successes.") if ok else {}
    dists: dict[str, dict[str, Any] | None] = {}
    for metric, name in LATENCIES.items():
        node = latency.get(name)
        count = ok if metric in ("ttft_ms", "e2e_ms") else None
        dists[metric] = (
            common.distribution(_stats(node), 1000.0, count) if isinstance(node, Mapping) else None
        )
    tput = successes.get("throughput") or {}
    rps = common.number(tput.get("requests_per_sec"))
    scalars = {
        "request_throughput_rps": rps,
        "output_tokens_per_s": common.number(tput.get("output_tokens_per_sec")),
        "input_tokens_per_s": common.number(tput.get("input_tokens_per_sec")),
        "total_tokens_per_s": common.number(tput.get("total_tokens_per_sec")),
    }
    seconds = ok / rps if rps else None  # requests_per_sec is successes / that window, exactly
    return common.measured(common.counts(sent, ok, failed), seconds, dists, scalars)


def _load(data: Mapping[str, Any]) -> dict[str, Any]:
    ls = data.get("load_summary") or {}
    return {
        "concurrency": ls.get("concurrency"),
        "rate": common.number(ls.get("requested_rate")),
        "achieved_rate": common.number(ls.get("achieved_rate")),
    }


def stage_files(folder: Path) -> list[Path]:
    """The ``stage_<n>_lifecycle_metrics.json`` files of a run's folder, in stage order."""
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := STAGE_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def load(data: Any, path: Path, name: str) -> tuple[Summary, str | None]:
    block = _block(data, path)
    stages = []
    if path.name == SUMMARY_FILE:
        for i, stage_path in enumerate(stage_files(path.parent)):
            stage_data = common.read_json(stage_path)
            if not recognises(stage_data):
                raise common.missing(stage_path, TOOL, "load_summary")
            stage_load = _load(stage_data)
            stage_name = f"rate={stage_load['rate']:g}" if stage_load["rate"] is not None else stage_path.stem
            stages.append(common.stage(i, stage_name, stage_load, _block(stage_data, stage_path), TOOL))
    lengths = {
        "server_prompt_tokens": _mean(data, "prompt_len"),
        "server_output_tokens": _mean(data, "output_len"),
    }
    conditions = {
        "target": {"url": None, "endpoint": None, "model": None},
        "load": _load(data) if len(stages) < 2 else {"stages": [s["name"] for s in stages]},
        "lengths": {"realised": lengths},
    }
    return common.summary(name=name, block=block, conditions=conditions, stages=stages), None


def _mean(data: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    node = common.get(data, f"successes.{key}")
    if not isinstance(node, Mapping) or common.number(node.get("mean")) is None:
        return None
    return {"count": common.get(data, "successes.count"), "mean": node["mean"]}
