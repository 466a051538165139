"""Compare N saved runs: metrics side by side, every condition they differ in, overlaid CDFs.

(The module is ``comparison``, not ``compare``: importing a submodule ``loadgen.compare``
would replace the public function ``loadgen.compare`` with the module.)

Pure: reads ``summary.json`` and ``requests.jsonl`` of saved runs, never a server. The first
run is the reference; every other run's metrics are also given relative to it. When any run was
served by the built-in simulator, the table also has ``FIDELITY_ROWS`` (its measurement error;
empty for the other runs) and the comparison its verdicts (``fidelity_verdicts``).

The condition diff flattens ``conditions`` to dotted paths (``lengths.requested.output_tokens
.value``) and lists every path whose value is not the same in all runs, with three exceptions,
all on purpose and all listed here:

- ``IGNORED_CONDITIONS``: the run's own name and where its files went. They differ between
  any two runs and say nothing about what was measured. Everything else is kept, including
  ``target.url`` (a different host or port is a different server until shown otherwise) and
  ``client.git_commit`` (a different client build, dirty flag included).
- ``SHADOWED``: ``profile.*`` fields that ``conditions`` also reports under an effective name
  (``profile.load`` is ``load``, ``profile.target.model`` (requested, often null) is
  ``target.model`` (what was driven)); each difference is listed once, under that name.
- A realised length distribution (``lengths.realised.*``, a dict of count/mean/p50/...) is one
  field, compared without its ``count`` (the number of requests, which is listed on its own as
  ``profile.workload.num_requests``); an empty mapping is the same as an absent one.

Output agreement (``Comparison.agreements``): when runs kept their answers
(``output.answers.keep``, ``--keep-answers``), each later run's answers against the first run's,
prompt by prompt (``loadgen.analysis.agreement``). Each run's accuracy against expected answers
is a table row (``QUALITY_ROWS``) when some run scored its answers.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from loadgen import metric_defs
from loadgen.analysis import fidelity
from loadgen.analysis.agreement import Answer, agreement, read_answers
from loadgen.analysis.compare_curves import CurveComparison, curve_comparison
from loadgen.analysis.runs import REQUESTS, load_summary, load_table
from loadgen.errors import ConfigError, ResultError

IGNORED_CONDITIONS: tuple[str, ...] = ("profile.name", "profile.output.*")
SHADOWED: dict[str, str] = {
    "profile.target.url": "target.url",
    "profile.target.endpoint": "target.endpoint",
    "profile.target.model": "target.model",
    "profile.target.transport": "target.transport",
    "profile.workload.seed": "seed",
    "profile.load": "load",
    "profile.labels": "labels",
    "profile.workload.input_tokens": "lengths.requested.input_tokens",
    "profile.workload.output_tokens": "lengths.requested.output_tokens",
}
# A difference under these makes the runs' latencies not like-for-like: warned about at the top.
WORKLOAD_FIELDS: tuple[str, ...] = ("profile.workload.*", "lengths.*", "load.*", "seed")

# The table's rows and CDF plots: the registry's metrics with ``compare`` set, then counts.
LATENCIES: tuple[str, ...] = tuple(d.name for d in metric_defs.DISTRIBUTIONS if d.compare)
TABLE_STATS: tuple[str, ...] = metric_defs.TABLE_STATS
TABLE_RUN_METRICS: tuple[str, ...] = tuple(d.name for d in metric_defs.RUN_SCALARS if d.compare)
TABLE_COUNTS: tuple[str, ...] = ("sent", "ok", "failed")
# Rows of the client's measurement error against the built-in simulator (``summary.fidelity``),
# after the others and only when some run has the block: the two lags its verdict judges, and
# how many requests back them. Its verdict, a word, is not a table row: ``fidelity_verdicts``.
FIDELITY_ROWS: tuple[str, ...] = (
    *(f"{fidelity.PREFIX}{name} {s}" for name in fidelity.THRESHOLDS for s in ("p50", "p99")),
    f"{fidelity.PREFIX}requests_matched",
)
FIDELITY_VERDICT_ROW = f"{fidelity.PREFIX}verdict"
# Each run's own score against expected answers (``summary.quality``), when some run has one.
QUALITY_ROWS: tuple[str, ...] = ("quality.accuracy", "quality.scored")
ABSENT = "(absent)"


@dataclass(frozen=True)
class ConditionDiff:
    """One condition field and its value in each run (``ABSENT`` where a run lacks it)."""

    field: str
    values: tuple[Any, ...]


def matches(path: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, p) or path == p.removesuffix(".*") for p in patterns)


def flatten_conditions(conditions: dict) -> dict[str, Any]:
    """``conditions`` as {dotted path: leaf value}, ignored and shadowed fields left out."""
    out: dict[str, Any] = {}

    def walk(node: Any, path: str) -> None:
        if matches(path, IGNORED_CONDITIONS) or path in SHADOWED:
            return
        if isinstance(node, dict) and {"count", "mean"} <= node.keys():
            out[path] = {k: v for k, v in node.items() if k != "count"}
        elif isinstance(node, dict):
            for key, child in node.items():
                walk(child, f"{path}.{key}" if path else str(key))
        else:
            out[path] = node

    walk(conditions, "")
    return out


def condition_diff(conditions: Sequence[dict]) -> list[ConditionDiff]:
    """Every field (dotted path, sorted) whose value is not the same in all ``conditions``."""
    flat = [flatten_conditions(c) for c in conditions]
    fields = sorted(set().union(*flat))
    out = []
    for f in fields:
        values = tuple(d.get(f, ABSENT) for d in flat)
        if any(v != values[0] for v in values[1:]):
            out.append(ConditionDiff(f, values))
    return out


def workload_differences(diff: Sequence[ConditionDiff]) -> list[str]:
    return [d.field for d in diff if matches(d.field, WORKLOAD_FIELDS)]


def metric_value(summary: dict, row: str) -> float | None:
    """The number behind a table row label: ``"ttft_ms p99"``, ``"goodput_rps"``, ``"sent"`` or
    ``"fidelity.chunk_lag_ms p99"`` (None for a run without a fidelity block) or
    ``"quality.accuracy"`` (None for a run that scored no answer)."""
    metric, _, stat = row.partition(" ")
    if metric in QUALITY_ROWS:
        value = (summary.get("quality") or {}).get(metric.removeprefix("quality."))
    elif metric in TABLE_COUNTS:
        value = summary["counts"].get(metric)
    elif metric.startswith(fidelity.PREFIX):
        value = fidelity.lookup(summary, metric.removeprefix(fidelity.PREFIX), stat or None)
    else:
        value = metric_defs.lookup(summary, metric, stat or None)
    return None if value is None else float(value)


TABLE_ROWS: tuple[str, ...] = (
    *(f"{m} {s}" for m in LATENCIES for s in TABLE_STATS),
    *TABLE_RUN_METRICS,
    *TABLE_COUNTS,
)


@dataclass(frozen=True)
class Comparison:
    """The result of ``compare``: usable from a notebook (``table``, ``relative`` are DataFrames
    indexed by row labels such as ``"ttft_ms p99"``, one column per run) and rendered by
    ``loadgen.report.compare`` into compare.md, compare.json and CDF plots (its ``markdown``
    is the text a notebook can display). ``curves`` is set when any run is multi-stage: the
    runs' latency-throughput curves and capacity at the SLA (``analysis.compare_curves``).
    ``answers_kept``: per run, whether it kept its answers; ``agreements``: per run after the
    first, ``agreement(first run's answers, its answers)``, None where either kept none."""

    names: tuple[str, ...]
    paths: tuple[Path, ...]
    summaries: tuple[dict, ...]
    table: pd.DataFrame
    relative: pd.DataFrame  # (value - first run's) / first run's; NaN where undefined
    conditions: tuple[ConditionDiff, ...]
    warnings: tuple[str, ...]
    curves: CurveComparison | None = None
    answers_kept: tuple[bool, ...] = ()
    agreements: tuple[dict[str, Any] | None, ...] = ()

    @property
    def differing_fields(self) -> list[str]:
        return [d.field for d in self.conditions]

    @property
    def fidelity_verdicts(self) -> dict[str, str | None] | None:
        """{run: its fidelity verdict ("pass", "fail", "no_data"), None for a run the built-in
        simulator did not serve}; None when no run has a fidelity block."""
        verdicts = {n: (s.get("fidelity") or {}).get("verdict") for n, s in zip(self.names, self.summaries)}
        return verdicts if any(s.get("fidelity") for s in self.summaries) else None

    @property
    def output_agreement(self) -> dict[str, Any]:
        """compare.json's ``output_agreement``: the reference, which runs kept answers, and
        each later run's agreement with the reference (None where it could not be measured)."""
        return {
            "reference": self.names[0],
            "answers_kept": dict(zip(self.names, self.answers_kept)),
            "runs": dict(zip(self.names[1:], self.agreements)),
        }

    def frame(self) -> pd.DataFrame:
        """Values and relative differences in one frame (columns ``run`` and ``run vs first``)."""
        out = self.table.copy()
        for name in self.names[1:]:
            out[f"{name} vs {self.names[0]}"] = self.relative[name]
        return out

    def cdfs(self) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray, int]]]:
        """{metric: {run: (x, fraction of samples <= x, samples)}} over ok measured requests,
        as ``gaps.cdf_points`` draws them: every value of a per-request metric, and the
        inter-token gaps streamed into 4,096 bins once there are many (100,000 requests x 256
        tokens are 25 million gaps a run: sorted and drawn whole they took 6 GB). One run's
        table is read at a time."""
        from loadgen.analysis.gaps import cdf_points
        from loadgen.analysis.metrics import distribution_samples

        out: dict[str, dict[str, tuple[np.ndarray, np.ndarray, int]]] = {m: {} for m in LATENCIES}
        for name, path in zip(self.names, self.paths):
            samples = distribution_samples(load_table(path))
            for m in LATENCIES:
                out[m][name] = cdf_points(samples[m])
            del samples
        return out

    def to_dict(self) -> dict:
        def clean(x: Any) -> Any:
            return None if x is None or np.isnan(x) else float(x)

        return {
            "runs": [
                {"name": n, "path": str(p), "run_id": s.get("run_id")}
                for n, p, s in zip(self.names, self.paths, self.summaries)
            ],
            "reference": self.names[0],
            "warnings": list(self.warnings),
            "condition_diff": [{"field": d.field, "values": list(d.values)} for d in self.conditions],
            "ignored_conditions": list(IGNORED_CONDITIONS),
            "shadowed_conditions": dict(SHADOWED),
            "metrics": {
                row: {n: clean(self.table.at[row, n]) for n in self.names} for row in self.table.index
            },
            "relative": {
                row: {n: clean(self.relative.at[row, n]) for n in self.names[1:]}
                for row in self.relative.index
            },
            # runs the built-in simulator served only, as are the table's fidelity rows
            **({"fidelity_verdict": self.fidelity_verdicts} if self.fidelity_verdicts else {}),
            "output_agreement": self.output_agreement,
            # multi-stage runs only: a single-stage comparison's JSON is as it always was
            **({"curves": self.curves.to_dict()} if self.curves is not None else {}),
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2)


def compare(paths: Sequence[str | Path]) -> Comparison:
    """Compare saved runs (run directories, or their summary.json). Needs at least two.

    Raises ``loadgen.result.ResultError`` for a path that is not a readable run (including a
    summary written with a ``schema_version`` this loadgen does not read) and ``ValueError``
    for fewer than two paths.
    """
    if len(paths) < 2:
        raise ConfigError(f"compare needs at least two runs, got {len(paths)}", what="comparison")
    summaries = [load_summary(p) for p in paths]
    run_dirs = tuple(Path(p).parent if Path(p).is_file() else Path(p) for p in paths)
    names = _unique_names([s.get("run_id") or d.name for s, d in zip(summaries, run_dirs)])
    rows = TABLE_ROWS + (FIDELITY_ROWS if any(s.get("fidelity") for s in summaries) else ())
    rows += QUALITY_ROWS if any(metric_value(s, QUALITY_ROWS[0]) is not None for s in summaries) else ()
    table = pd.DataFrame(
        {n: [metric_value(s, row) for row in rows] for n, s in zip(names, summaries)},
        index=list(rows),
        dtype=float,
    )
    first = table[names[0]]
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = table.sub(first, axis=0).div(first.where(first != 0), axis=0)
    diff = condition_diff([s.get("conditions") or {} for s in summaries])
    kept = tuple(answers_kept(s) for s in summaries)
    return Comparison(
        tuple(names),
        run_dirs,
        tuple(summaries),
        table,
        relative,
        tuple(diff),
        tuple(_warnings(names, summaries, diff)),
        curve_comparison(names, summaries, {d.field: d.values for d in diff}),
        kept,
        _agreements(run_dirs, kept),
    )


def answers_kept(summary: dict) -> bool:
    """Whether a run kept its measured answers (``output.answers.keep``): its summary counts
    them, so a run that kept none is known without reading its records."""
    return bool((summary.get("quality") or {}).get("answers_kept"))


def run_answers(run: str | Path) -> dict[int, Answer]:
    """``read_answers`` of a saved run (its directory or its summary.json); a missing or
    damaged requests.jsonl is a ``ResultError``."""
    path = (Path(run).parent if Path(run).is_file() else Path(run)) / REQUESTS
    if not path.exists():
        raise ResultError(f"{path} is missing: the run's answers are kept there")
    try:
        return read_answers(path)
    except ValueError as exc:
        raise ResultError(str(exc)) from None


def _agreements(run_dirs: Sequence[Path], kept: Sequence[bool]) -> tuple[dict[str, Any] | None, ...]:
    """Each later run's agreement with the first: the reference's answers and one other run's
    are held at a time, as pieces of text (never a DataFrame)."""
    if not kept[0]:
        return tuple(None for _ in run_dirs[1:])
    ref = run_answers(run_dirs[0])
    return tuple(agreement(ref, run_answers(d)) if k else None for d, k in zip(run_dirs[1:], kept[1:]))


def _warnings(names: Sequence[str], summaries: Sequence[dict], diff: Sequence[ConditionDiff]) -> list[str]:
    out = []
    workload = workload_differences(diff)
    if workload:
        out.append(
            "the runs' workloads differ (" + ", ".join(workload) + "): their latencies and "
            "throughputs are not like-for-like"
        )
    for field in ("target.model", "target.endpoint"):
        if any(d.field == field for d in diff):
            out.append(f"the runs drove a different {field.split('.')[1]} ({field})")
    for name, s in zip(names, summaries):
        if (s.get("client") or {}).get("client_limited"):
            out.append(
                f"{name}: the client limited this run (client.client_limited): its "
                "latencies include client delay"
            )
        if s.get("interrupted"):
            out.append(f"{name}: the run was interrupted before it finished")
    return out


def _unique_names(names: list[str]) -> list[str]:
    out: list[str] = []
    for i, n in enumerate(names):
        out.append(n if n not in out and names.count(n) == 1 else f"{n}#{i + 1}")
    return out
