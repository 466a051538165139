"""The pieces every peer tool's reader shares: reading a file so that a damaged one is a
``ResultError`` naming the file and the field, and building the blocks of a loadgen summary
(``loadgen.summary``) out of the numbers a tool reports.

Why a summary and not a type of its own: ``compare``'s table, its condition diff and its curves
already read summaries (``metric_defs.lookup``, ``analysis.curve``); a peer result shaped like
one goes through the same code. What a tool does not report stays absent or null, so a table
cell shows a dash rather than a number the tool never measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import orjson

from loadgen.analysis import curve as curve_mod
from loadgen.errors import ResultError
from loadgen.summary import StageSummary, Summary

# The stats of a loadgen distribution a tool may fill (``metric_defs.STATS`` without count).
STATS: tuple[str, ...] = ("mean", "std", "min", "p50", "p90", "p95", "p99", "p99_9", "max")
MS_PER_UNIT: dict[str, float] = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3, "seconds": 1e3}


def read_json(path: Path, lines: bool = False) -> Any:
    """The JSON in ``path`` (with ``lines``, a file of several JSON lines as a list of them:
    vLLM's ``--append-result``); a file that is empty, cut short or not JSON is a
    ``ResultError`` naming it and where it stops parsing (byte, line and column)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultError(f"{path}: cannot be read ({exc.strerror})") from None
    if not raw.strip():
        raise ResultError(f"{path}: the file is empty, so it holds no result")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        whole = exc
    rows = [ln for ln in raw.splitlines() if ln.strip()]
    if lines and len(rows) > 1:
        out = []
        for number, row in enumerate(rows, 1):
            try:
                out.append(orjson.loads(row))
            except orjson.JSONDecodeError as exc:
                if number == 1:  # not JSON lines: a broken JSON document, said as one below
                    break
                raise ResultError(
                    f"{path}: invalid JSON on line {number} of its JSON lines, "
                    f"at column {exc.colno}: {exc.msg}"
                ) from None
        else:
            return out
    raise ResultError(
        f"{path}: invalid JSON at byte {whole.pos} (line {whole.lineno}, column {whole.colno}): {whole.msg}"
        + (" (the file is cut short)" if whole.pos >= len(raw.rstrip()) else "")
    ) from None


def missing(path: Path, tool: str, field: str) -> ResultError:
    return ResultError(f"{path}: not a readable {tool} result: field {field} is missing or not a number")


def get(node: Any, dotted: str) -> Any:
    """The value at ``dotted`` ("a.b.0.c") under ``node``, None wherever it is absent."""
    for key in dotted.split("."):
        if isinstance(node, Mapping):
            node = node.get(key)
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def number(value: Any) -> float | None:
    """A finite number, or None (a bool, a string, NaN or a missing value is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def need(node: Any, dotted: str, path: Path, tool: str, prefix: str = "") -> float:
    """The number at ``dotted``, or a ``ResultError`` naming ``prefix + dotted``."""
    value = number(get(node, dotted))
    if value is None:
        raise missing(path, tool, prefix + dotted)
    return value


def need_map(node: Any, dotted: str, path: Path, tool: str, prefix: str = "") -> Mapping[str, Any]:
    value = get(node, dotted)
    if not isinstance(value, Mapping):
        raise ResultError(f"{path}: not a readable {tool} result: field {prefix + dotted} is missing")
    return value


def distribution(stats: Mapping[str, Any], scale: float = 1.0, count: float | None = None) -> dict[str, Any]:
    """A loadgen distribution (ms) from ``{loadgen stat: the tool's value}``, each value times
    ``scale`` (1000 for seconds); a stat the tool does not report is null."""
    out: dict[str, Any] = {"count": None if count is None else int(count)}
    for stat in STATS:
        v = number(stats.get(stat))
        out[stat] = None if v is None else v * scale
    return out


def counts(
    sent: float | None, ok: float | None, failed: float | None, cancelled: float = 0
) -> dict[str, Any]:
    known = None if ok is None or failed is None else ok + failed
    return {
        "sent": None if sent is None else int(sent),
        "ok": None if ok is None else int(ok),
        "failed": None if failed is None else int(failed),
        "cancelled": int(cancelled),
        "warmup": 0,
        "errors_by_class": {},
        "error_rate": failed / known if failed is not None and known else None,
    }


def measured(
    counts_block: dict[str, Any],
    seconds: float | None,
    distributions: Mapping[str, dict[str, Any] | None],
    scalars: Mapping[str, float | None],
    goodput_rps: float | None = None,
) -> dict[str, Any]:
    """The counts, window, metrics and sla blocks of one load point (or of a whole file)."""
    metrics: dict[str, Any] = {k: v for k, v in distributions.items() if v is not None}
    for key in ("request_throughput_rps", "input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s"):
        metrics[key] = scalars.get(key)
    metrics["mean_concurrency"] = scalars.get("mean_concurrency")
    metrics["goodput"] = {
        "requests_per_s": goodput_rps,
        "output_tokens_per_s": None,
        "attained_fraction": None,
    }
    return {
        "counts": counts_block,
        "window": {"start_ns": None, "end_ns": None, "seconds": seconds},
        "metrics": metrics,
        "sla": {"rules": [], "verdict": "none", "details": [], "slos": {}, "slo_note": "not a loadgen run"},
    }


def stage(index: int, name: str, load: dict[str, Any], block: dict[str, Any], tool: str) -> StageSummary:
    """One load point of a tool's file as a loadgen stage (no steady-state verdict: the tool
    keeps no per-request timeline loadgen could judge it from)."""
    out = {"index": index, "name": name, "load": load, **block}
    out["steady_state"] = {"steady": None, "reason": f"not judged: a result file of {tool}"}
    return cast(StageSummary, out)


def iso(value: Any) -> str | None:
    """A wall-clock label: an ISO string as given, or Unix seconds as ISO 8601 UTC."""
    if isinstance(value, str):
        return value
    v = number(value)
    return None if v is None else datetime.fromtimestamp(v, tz=timezone.utc).isoformat()


def summary(
    *,
    name: str,
    block: dict[str, Any],
    conditions: dict[str, Any],
    stages: Iterable[StageSummary] = (),
    started_at: str | None = None,
    ended_at: str | None = None,
) -> Summary:
    """A summary.json-shaped dict: ``block`` (``measured``) for the whole file, and with two or
    more ``stages`` those stages and their curve, as a loadgen multi-stage run has them."""
    out: dict[str, Any] = {
        "schema_version": 1,
        "run_id": name,
        "interrupted": False,
        "conditions": prune(conditions),
        **block,
        "client": {},
    }
    out.update(prune({"started_at": started_at, "ended_at": ended_at}))  # labels, when the file has them
    stage_list = list(stages)
    if len(stage_list) >= 2:
        out["stages"] = stage_list
        out["curve"] = curve_mod.curve(stage_list)
    return cast(Summary, out)


def prune(node: Any) -> Any:
    """``node`` without its null leaves and the mappings they empty: a condition a tool's file
    does not state is unknown, not different (compare lists what the file says)."""
    if not isinstance(node, Mapping):
        return node
    out = {k: prune(v) for k, v in node.items() if v is not None}
    return {k: v for k, v in out.items() if v != {}}


def pooled(stages: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole file's counts over several load points (sums are exact) and its window (their
    sum); no distribution: percentiles measured at different loads do not pool."""
    c = [s["counts"] for s in stages]

    def total(key: str) -> float | None:
        values = [x.get(key) for x in c]
        return None if any(v is None for v in values) else float(sum(values))

    seconds = [s["window"]["seconds"] for s in stages]
    return measured(
        counts(total("sent"), total("ok"), total("failed"), total("cancelled") or 0),
        None if any(v is None for v in seconds) else float(sum(seconds)),
        {},
        {},
    )


def run_name(path: Path, generic: Iterable[str]) -> str:
    """The file's stem, or its folder's name when the stem is the tool's fixed file name."""
    return path.parent.name if path.stem in set(generic) and path.parent.name else path.stem
