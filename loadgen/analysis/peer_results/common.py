"""The pieces every peer tool's reader shares: reading a file strictly, so that a damaged one is
a ``ResultError`` naming the file and the field, and building the blocks of a loadgen summary
(``loadgen.summary``) out of the numbers a tool reports.

Why a summary and not a type of its own: ``compare``'s table, its condition diff and its curves
already read summaries (``metric_defs.lookup``, ``analysis.curve``); a peer result shaped like
one goes through the same code. What a tool does not report stays absent or null, so a table
cell shows a dash rather than a number the tool never measured.

Why strict (``Fields``): every figure loadgen reads is a count, a rate, a length or a latency,
never negative. A field that is present but of the wrong type (``"fast"``, a list) or negative
is an error naming its path, not a silent dash and never a figure shown as read ("ok -5"):
the file is not what its tool wrote, and the user should know which field to look at.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
# The rates of a load point (``metrics.*``), each pooled over several points by its window.
RATES: tuple[str, ...] = (
    "request_throughput_rps",
    "input_tokens_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
)
UNRECORDED = "not recorded"


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


def get(node: Any, dotted: str) -> Any:
    """The value at ``dotted`` ("a.b.0.c") under ``node``, None wherever it is absent. A key
    that itself holds a dot (inference-perf's "p99.9", vLLM's "p99.9_ttft_ms") is found whole."""
    if isinstance(node, Mapping) and dotted in node:
        return node[dotted]
    key, _, rest = dotted.partition(".")
    if isinstance(node, Mapping):
        child = node.get(key)
    elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
        child = node[int(key)]
    else:
        return None
    return get(child, rest) if rest and child is not None else child


def _shown(value: Any) -> str:
    """A wrong value as an error message quotes it: short, and its kind when it is a container."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Fields:
    """Reads the fields of one tool's file, each checked on the way in (STYLE: validate once):
    absent or null is None (the tool did not report it), a number must be a finite number and
    not negative, a mapping a mapping, a label a string. ``prefix`` is the dotted path of the
    node read from, so an error names the field as it sits in the file
    (``benchmarks.2.metrics.request_totals.successful``)."""

    path: Path
    tool: str

    def error(self, field: str, problem: str) -> ResultError:
        return ResultError(f"{self.path}: not a readable {self.tool} result: field {field} {problem}")

    def missing(self, field: str) -> ResultError:
        return self.error(field, "is missing")

    def number(self, node: Any, dotted: str, prefix: str = "") -> float | None:
        """The number at ``dotted``: None when absent or null, else a finite, non-negative one."""
        value = get(node, dotted)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(prefix + dotted, f"is not a number (got {_shown(value)})")
        if value < 0:
            raise self.error(prefix + dotted, f"is negative ({value:g}): no count, rate or latency is")
        return float(value)

    def need(self, node: Any, dotted: str, prefix: str = "") -> float:
        value = self.number(node, dotted, prefix)
        if value is None:
            raise self.missing(prefix + dotted)
        return value

    def mapping(self, node: Any, dotted: str, prefix: str = "") -> Mapping[str, Any] | None:
        value = get(node, dotted)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.error(prefix + dotted, f"is not an object (got {_shown(value)})")
        return value

    def need_map(self, node: Any, dotted: str, prefix: str = "") -> Mapping[str, Any]:
        value = self.mapping(node, dotted, prefix)
        if value is None:
            raise self.missing(prefix + dotted)
        return value

    def items(self, node: Any, dotted: str, prefix: str = "") -> Sequence[Any] | None:
        value = get(node, dotted)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(prefix + dotted, f"is not a list (got {_shown(value)})")
        return value

    def text(self, node: Any, dotted: str, prefix: str = "") -> str | None:
        """A label (a version, a model, a URL): a string, or a number written as one."""
        value = get(node, dotted)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.error(prefix + dotted, f"is not a string (got {_shown(value)})")
        return str(value)

    def stats(
        self, node: Any, dotted: str, keys: Mapping[str, str], prefix: str = ""
    ) -> dict[str, Any] | None:
        """{loadgen stat: value} of the distribution at ``dotted`` whose stats sit under the
        tool's ``keys`` (``{"p50": "median"}``; a dotted key reaches into ``percentiles``);
        None when the distribution is absent."""
        dist = self.mapping(node, dotted, prefix)
        if dist is None:
            return None
        where = f"{prefix}{dotted}."
        return {mine: self.number(dist, theirs, where) for mine, theirs in keys.items()}


def distribution(stats: Mapping[str, Any], scale: float = 1.0, count: float | None = None) -> dict[str, Any]:
    """A loadgen distribution (ms) from ``{loadgen stat: the value read}``, each value times
    ``scale`` (1000 for seconds); a stat the tool does not report is null."""
    out: dict[str, Any] = {"count": None if count is None else int(count)}
    for stat in STATS:
        v = stats.get(stat)
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
    for key in RATES:
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
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return datetime.fromtimestamp(value, tz=timezone.utc).isoformat()


def summary(
    *,
    name: str,
    block: dict[str, Any],
    conditions: dict[str, Any],
    stages: Iterable[StageSummary] = (),
    started_at: str | None = None,
    ended_at: str | None = None,
    run_id: str | None = None,
) -> Summary:
    """A summary.json-shaped dict: ``block`` (``measured``) for the whole file, and with two or
    more ``stages`` those stages and their curve, as a loadgen multi-stage run has them.
    ``run_id`` is the id the tool recorded for its run (``UNRECORDED`` without one)."""
    out: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id or UNRECORDED,
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


def pooled_mean(parts: Sequence[tuple[float | None, float | None]]) -> float | None:
    """The mean over several load points from each point's (mean, number of samples): exact,
    as a mean is a sum over a count; None when any point lacks either."""
    if not parts or any(m is None or n is None for m, n in parts):
        return None
    total = sum(cast(float, n) for _, n in parts)
    return sum(cast(float, m) * cast(float, n) for m, n in parts) / total if total else None


def pooled(
    stages: list[dict[str, Any]], means: Mapping[str, Sequence[float | None]] | None = None
) -> dict[str, Any]:
    """The whole file's block over several load points: counts (sums are exact), the window
    (the sum of the points' windows), each rate as its amount over that window (a point's rate
    times its window is its amount; the mean concurrency likewise), and the means of ``means``
    ({metric: each point's number of samples}, where the file gives it). No percentile: those
    measured at different loads do not pool, so they stay per stage (compare says so)."""
    c = [s["counts"] for s in stages]

    def total(key: str) -> float | None:
        values = [x.get(key) for x in c]
        return None if any(v is None for v in values) else float(sum(values))

    seconds = [s["window"]["seconds"] for s in stages]
    window = None if any(v is None for v in seconds) else float(sum(seconds))
    scalars: dict[str, float | None] = {}
    for key in (*RATES, "mean_concurrency"):  # a time average pools over time as a rate does
        rates = [s["metrics"].get(key) for s in stages]
        known = window and all(r is not None for r in rates)
        scalars[key] = pooled_mean(list(zip(rates, seconds))) if known else None
    dists: dict[str, dict[str, Any] | None] = {}
    for metric, samples in (means or {}).items():
        mean = pooled_mean(
            [((s["metrics"].get(metric) or {}).get("mean"), n) for s, n in zip(stages, samples)]
        )
        n_total = None if any(n is None for n in samples) else sum(cast(float, n) for n in samples)
        dists[metric] = None if mean is None else distribution({"mean": mean}, count=n_total)
    return measured(
        counts(total("sent"), total("ok"), total("failed"), total("cancelled") or 0), window, dists, scalars
    )


def run_name(path: Path, generic: Iterable[str]) -> str:
    """The file's stem, or its folder's name when the stem is the tool's fixed file name (where
    the tools name a run: AIPerf's artifact folder, inference-perf's storage path)."""
    return path.parent.name if path.stem in set(generic) and path.parent.name else path.stem
