"""Compare N saved runs: metrics side by side, every condition they differ in, overlaid CDFs.

Pure: reads ``summary.json`` and ``requests.jsonl`` of saved runs, never a server. The first
run is the reference; every other run's metrics are also given relative to it. When any run was
served by the built-in simulator, the table also has ``FIDELITY_ROWS`` (its measurement error;
empty for the other runs) and the comparison its verdicts (``fidelity_verdicts``).

The conditions the runs differ in (``Comparison.conditions``, and the warnings drawn from them)
are ``loadgen.analysis.condition_diff``'s: what is compared, what is ignored and why is written
there. What the runs answered is read by ``loadgen.analysis.saved_answers``. Both modules' names
are re-exported here, where callers first found them.

Output agreement (``Comparison.agreements``): when runs kept their answers
(``output.answers.keep``, ``--keep-answers``), each later run's answers against the first run's,
prompt by prompt (``loadgen.analysis.agreement``). Each run's accuracy against expected answers
is a table row (``QUALITY_ROWS``) when some run scored its answers. Runs over several replica
URLs add each replica's rows after the pooled ones (``analysis.compare_replicas``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from loadgen import metric_defs
from loadgen.analysis import fidelity
from loadgen.analysis.compare_curves import CurveComparison, curve_comparison
from loadgen.analysis.compare_peers import conditions_diff, definitions, peer_warnings, read_source
from loadgen.analysis.compare_replicas import PREFIX as REPLICA_PREFIX
from loadgen.analysis.compare_replicas import replica_rows, replica_value
from loadgen.analysis.condition_diff import (
    ABSENT,
    IGNORED_CONDITIONS,
    SHADOWED,
    WORKLOAD_FIELDS,
    ConditionDiff,
    condition_diff,
    flatten_conditions,
    matches,
    workload_differences,
)
from loadgen.analysis.peer_results import PeerResult
from loadgen.analysis.run_warnings import run_warnings
from loadgen.analysis.runs import load_table
from loadgen.analysis.saved_answers import agreements, answers_kept, run_answers
from loadgen.errors import ConfigError
from loadgen.summary import Summary

__all__ = [
    "ABSENT",
    "FIDELITY_ROWS",
    "FIDELITY_VERDICT_ROW",
    "IGNORED_CONDITIONS",
    "LATENCIES",
    "OPTIONAL_RUN_METRICS",
    "QUALITY_ROWS",
    "SHADOWED",
    "TABLE_COUNTS",
    "TABLE_ROWS",
    "TABLE_RUN_METRICS",
    "TABLE_STATS",
    "WORKLOAD_FIELDS",
    "Comparison",
    "ConditionDiff",
    "answers_kept",
    "compare",
    "condition_diff",
    "flatten_conditions",
    "matches",
    "metric_value",
    "run_answers",
    "workload_differences",
]

# The table's rows and CDF plots: the registry's metrics with ``compare`` set, then counts.
LATENCIES: tuple[str, ...] = tuple(d.name for d in metric_defs.DISTRIBUTIONS if d.compare)
TABLE_STATS: tuple[str, ...] = metric_defs.TABLE_STATS
TABLE_RUN_METRICS: tuple[str, ...] = tuple(
    d.name for d in metric_defs.RUN_SCALARS if d.compare and not d.when_present
)
# Rows of a block only some runs have (GPU energy, ``summary.telemetry``): shown when one has it.
OPTIONAL_RUN_METRICS: tuple[str, ...] = tuple(
    d.name for d in metric_defs.RUN_SCALARS if d.compare and d.when_present
)
TABLE_COUNTS: tuple[str, ...] = ("sent", "ok", "failed")
# Rows of the client's measurement error against the built-in simulator (``summary.fidelity``),
# after the others and only when some run has the block: the two lags its verdict judges, and
# how many requests back them. Its verdict, a word, is not a table row: ``fidelity_verdicts``.
FIDELITY_ROWS: tuple[str, ...] = (
    *(f"{fidelity.PREFIX}{name} {s}" for name in fidelity.THRESHOLDS for s in ("p50", "p99")),
    f"{fidelity.PREFIX}requests_matched",
)
FIDELITY_VERDICT_ROW = f"{fidelity.PREFIX}verdict"
# Each run's own score against expected answers (``summary.quality``), when some run has one;
# the valid share of its structured answers, when some run validated them.
QUALITY_ROWS: tuple[str, ...] = ("quality.accuracy", "quality.scored", "quality.json_valid")


def metric_value(summary: Summary, row: str) -> float | None:
    """The number behind a table row label: ``"ttft_ms p99"``, ``"goodput_rps"``, ``"sent"`` or
    ``"fidelity.chunk_lag_ms p99"`` (None for a run without a fidelity block),
    ``"quality.accuracy"`` (None for a run that scored no answer) or ``"replica.1.tpot_ms p99"``
    (``analysis.compare_replicas``: None for a run without that replica)."""
    metric, _, stat = row.partition(" ")
    if metric.startswith(REPLICA_PREFIX):
        return replica_value(summary, row)
    if metric in QUALITY_ROWS:
        quality: Mapping[str, Any] = summary.get("quality") or {}
        value = quality.get(metric.removeprefix("quality."))
    elif metric in TABLE_COUNTS:
        counts: Mapping[str, Any] = summary["counts"]
        value = counts.get(metric)
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
    summaries: tuple[Summary, ...]
    table: pd.DataFrame
    relative: pd.DataFrame  # (value - first run's) / first run's; NaN where undefined
    conditions: tuple[ConditionDiff, ...]
    warnings: tuple[str, ...]
    curves: CurveComparison | None = None
    answers_kept: tuple[bool, ...] = ()
    agreements: tuple[dict[str, Any] | None, ...] = ()
    # per run: the other tool's result file it was read from (``analysis.peer_results``), or None
    peers: tuple[PeerResult | None, ...] = ()

    def peer_of(self) -> tuple[PeerResult | None, ...]:
        """``peers``, one per run (a Comparison built without them: None each)."""
        return self.peers or (None,) * len(self.names)

    @property
    def latencies(self) -> tuple[str, ...]:
        """The distributions of ``LATENCIES`` some run has (runs of embeddings or rerank alone
        have no TTFT, ITL or TPOT: no empty rows, no empty CDF)."""
        return tuple(m for m in LATENCIES if any(metric_defs.present(s, m) for s in self.summaries))

    @property
    def differing_fields(self) -> list[str]:
        return [d.field for d in self.conditions]

    @property
    def fidelity_verdicts(self) -> dict[str, str | None] | None:
        """{run: its fidelity verdict ("pass", "fail", "no_data"), None for a run the built-in
        simulator did not serve}; None when no run has a fidelity block."""
        blocks = [s.get("fidelity") for s in self.summaries]
        verdicts: dict[str, str | None] = {
            n: b.get("verdict") if b else None for n, b in zip(self.names, blocks)
        }
        return verdicts if any(blocks) else None

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

        latencies = self.latencies
        out: dict[str, dict[str, tuple[np.ndarray, np.ndarray, int]]] = {m: {} for m in latencies}
        for name, path, peer in zip(self.names, self.paths, self.peer_of()):
            if peer is not None:  # another tool's file keeps no per-request records
                for m in latencies:
                    out[m][name] = cdf_points(np.array([]))
                continue
            samples = distribution_samples(load_table(path))
            for m in latencies:
                out[m][name] = cdf_points(samples[m])
            del samples
        return out

    def to_dict(self) -> dict:
        def clean(x: Any) -> Any:
            return None if x is None or np.isnan(x) else float(x)

        return {
            "runs": [
                {"name": n, "path": str(p), "run_id": s.get("run_id")} | ({"tool": t.tool} if t else {})
                for n, p, s, t in zip(self.names, self.paths, self.summaries, self.peer_of())
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
            # runs read from other tools' result files only
            **({"peer_results": definitions(self.names, self.peer_of())} if any(self.peer_of()) else {}),
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2)


def compare(paths: Sequence[str | Path]) -> Comparison:
    """Compare saved runs (run directories, or their summary.json) and result files of other
    tools (``analysis.peer_results``: vLLM bench serve, GuideLLM, AIPerf, inference-perf).
    Needs at least two.

    Raises ``loadgen.result.ResultError`` for a path that is not a readable run (including a
    summary written with a ``schema_version`` this loadgen does not read) and ``ValueError``
    for fewer than two paths.
    """
    if len(paths) < 2:
        raise ConfigError(f"compare needs at least two runs, got {len(paths)}", what="comparison")
    sources = [read_source(p) for p in paths]
    summaries = [s.summary for s in sources]
    run_dirs, peers = tuple(s.path for s in sources), tuple(s.peer for s in sources)
    names = _unique_names([s.name for s in sources])
    rows = tuple(r for r in TABLE_ROWS if _some_run_has(summaries, r)) + tuple(
        m for m in OPTIONAL_RUN_METRICS if any(metric_value(s, m) is not None for s in summaries)
    )
    rows += FIDELITY_ROWS if any(s.get("fidelity") for s in summaries) else ()
    rows += QUALITY_ROWS[:2] if any(metric_value(s, QUALITY_ROWS[0]) is not None for s in summaries) else ()
    rows += QUALITY_ROWS[2:] if any(metric_value(s, QUALITY_ROWS[2]) is not None for s in summaries) else ()
    rows += replica_rows(summaries)
    table = pd.DataFrame(
        {n: [metric_value(s, row) for row in rows] for n, s in zip(names, summaries)},
        index=list(rows),
        dtype=float,
    )
    first = table[names[0]]
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = table.sub(first, axis=0).div(first.where(first != 0), axis=0)
    diff = conditions_diff([s.get("conditions") or {} for s in summaries], peers)
    kept = tuple(answers_kept(s) for s in summaries)
    return Comparison(
        tuple(names),
        run_dirs,
        tuple(summaries),
        table,
        relative,
        tuple(diff),
        tuple(peer_warnings(names, peers) + run_warnings(names, summaries, diff)),
        curve_comparison(names, summaries, {d.field: d.values for d in diff}),
        kept,
        agreements(run_dirs, kept),
        peers,
    )


def _some_run_has(summaries: Sequence[Summary], row: str) -> bool:
    """Whether a row of ``TABLE_ROWS`` describes some run: a metric that applies to none of
    them (TTFT when every run is of embeddings or rerank) is no row of empty cells."""
    metric = row.partition(" ")[0]
    return metric in TABLE_COUNTS or any(metric_defs.present(s, metric) for s in summaries)


def _unique_names(names: list[str]) -> list[str]:
    out: list[str] = []
    for i, n in enumerate(names):
        out.append(n if n not in out and names.count(n) == 1 else f"{n}#{i + 1}")
    return out
