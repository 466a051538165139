"""Compare multi-stage runs: their latency-throughput curves side by side and their capacity at
the SLA. Pure: summaries in, data out; ``loadgen.report.compare_curves`` draws it.

What each run is called on the plots (the rule): the ``labels.*`` fields that differ between
the runs (``engine=h100``); else the first of ``LABEL_FIELDS`` that differs (the simulator
preset, the model, the target URL, the last only when some run drove a server of its own: the
built-in simulator listens on a random local port); else the run name. A label that still does
not tell two runs apart gets the run name added.

A run's capacity at the SLA (the rule): ``summary["capacity"]["capacity_rps"]`` with its 95%
interval when the run has one (``loadgen capacity`` searched for it); else the highest offered
load among its stages whose SLA verdict is ``pass`` (a concurrency or a rate, as the sweep was
driven: a lower bound from a fixed grid, not a search), labelled as such; else none.

A single-stage run compared with multi-stage ones is a one-point curve (its whole window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from loadgen import metric_defs
from loadgen.analysis import curve as curve_mod
from loadgen.analysis.gate_stages import capacity_of
from loadgen.summary import SlaDetails, StageSummary, Summary
from loadgen.summary.stages import Knee, SteadyState

LABEL_FIELDS: tuple[str, ...] = (
    "target.builtin_simulator.config.preset",
    "target.model",
    "target.url",
)
# The overlay plots: (file key, x, y, stat of y or None). x is a curve point's key. The p99 of
# each latency the registry plots on a curve (``curve_plot``) against throughput, then output
# tokens/s against the offered load.
PLOTS: tuple[tuple[str, str, str, str | None], ...] = (
    *((f"{d.name}_p99", "throughput_rps", d.name, "p99") for d in metric_defs.CURVE_PLOTS),
    ("output_tokens_per_s", "offered", "output_tokens_per_s", None),
)
CAPACITY_SEARCHED, HIGHEST_PASSING_STAGE, NO_CAPACITY = "capacity search", "highest passing stage", "none"


@dataclass(frozen=True)
class Capacity:
    """One run's capacity at the SLA (see the module's rule)."""

    value: float | None
    unit: str  # "req/s" or "concurrency" (a passing stage of a concurrency sweep)
    ci95: tuple[float, float] | None
    basis: str  # CAPACITY_SEARCHED | HIGHEST_PASSING_STAGE | NO_CAPACITY
    detail: str  # how it was found, or why there is none
    stage: int | None = None  # the passing stage (HIGHEST_PASSING_STAGE)
    stage_name: str | None = None
    throughput_rps: float | None = None  # measured at that stage / the searched capacity
    at_top: bool = False  # that stage is the sweep's highest: the capacity may be higher still


@dataclass(frozen=True)
class RunCurve:
    name: str
    label: str
    x: str  # "concurrency" | "rate": what the stages offered
    points: tuple[dict[str, Any], ...]
    knee: Knee | None
    sla: tuple[SlaDetails, ...]  # the run's SLA rule details (metric, stat, op, threshold)
    capacity: Capacity
    multi_stage: bool

    def knee_point(self) -> dict[str, Any] | None:
        if self.knee is None:
            return None
        return next((p for p in self.points if p["stage"] == self.knee["stage"]), None)


@dataclass(frozen=True)
class CurveComparison:
    label_source: str  # the condition field(s) the labels come from, or "run name"
    runs: tuple[RunCurve, ...]

    def thresholds(self, metric: str, stat: str | None) -> list[tuple[str, float, tuple[str, ...]]]:
        """The SLA rules on ``stat metric`` as (op, threshold, labels of the runs having it)."""
        seen: dict[tuple[str, float], list[str]] = {}
        for run in self.runs:
            for d in run.sla:
                if d.get("metric") == metric and d.get("stat") == stat and d.get("threshold") is not None:
                    seen.setdefault((str(d["op"]), float(d["threshold"])), []).append(run.label)
        return [(op, t, tuple(labels)) for (op, t), labels in seen.items()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "label_source": self.label_source,
            "runs": [
                {
                    "name": r.name,
                    "label": r.label,
                    "x": r.x,
                    "multi_stage": r.multi_stage,
                    "knee": r.knee,
                    "points": list(r.points),
                }
                for r in self.runs
            ],
            "capacity": [
                {"name": r.name, "label": r.label, **asdict(r.capacity)}
                | {"ci95": list(r.capacity.ci95) if r.capacity.ci95 else None}
                for r in self.runs
            ],
        }


def is_multi_stage(summary: Summary) -> bool:
    return bool((summary.get("curve") or {}).get("points"))


def curve_comparison(
    names: Sequence[str], summaries: Sequence[Summary], differing: Mapping[str, Sequence[Any]]
) -> CurveComparison | None:
    """The curves of ``summaries`` (named ``names``), or None when none is multi-stage.
    ``differing`` is {condition field: value in each run} for the fields that differ."""
    if not any(is_multi_stage(s) for s in summaries):
        return None
    sim = all(((s.get("conditions") or {}).get("target") or {}).get("builtin_simulator") for s in summaries)
    source, labels = run_labels(names, differing, url=not sim)
    runs = []
    for name, label, s in zip(names, labels, summaries):
        c = s["curve"] if is_multi_stage(s) else _one_point(s)
        points = tuple(c.get("points") or ())
        runs.append(
            RunCurve(
                name,
                label,
                c.get("x") or "concurrency",
                points,
                c.get("knee"),
                tuple((s.get("sla") or {}).get("details") or ()),
                capacity(s, points),
                is_multi_stage(s),
            )
        )
    return CurveComparison(source, tuple(runs))


def run_labels(
    names: Sequence[str], differing: Mapping[str, Sequence[Any]], *, url: bool = True
) -> tuple[str, list[str]]:
    """(where the labels come from, one label per run): see the module's rule. ``url=False``
    leaves ``target.url`` out (every run on the built-in simulator)."""
    by_labels = sorted(f for f in differing if f.startswith("labels."))
    if by_labels:
        labels = [
            ", ".join(f"{f.removeprefix('labels.')}={differing[f][i]}" for f in by_labels)
            for i in range(len(names))
        ]
        return ", ".join(by_labels), _distinct(labels, names)
    for f in LABEL_FIELDS:
        if f in differing and (url or f != "target.url"):
            return f, _distinct([str(v) for v in differing[f]], names)
    return "run name", list(names)


def _distinct(labels: list[str], names: Sequence[str]) -> list[str]:
    if len(set(labels)) == len(labels):
        return labels
    return [f"{label} ({name})" for label, name in zip(labels, names)]


def capacity(summary: Summary, points: Sequence[Mapping[str, Any]]) -> Capacity:
    """A run's capacity at the SLA (see the module's rule)."""
    cap = summary.get("capacity")
    rps, ci95 = capacity_of(summary)
    if rps is not None:
        method = cap.get("method") if cap else None
        detail = "summary.capacity (`loadgen capacity`" + (f", {method})" if method else ")")
        return Capacity(float(rps), "req/s", ci95, CAPACITY_SEARCHED, detail, throughput_rps=float(rps))
    passing = [p for p in points if p.get("sla_verdict") == "pass" and p.get("offered") is not None]
    if passing:
        best = max(passing, key=lambda p: float(p["offered"]))
        unit = "concurrency" if best.get("offered_kind") == "concurrency" else "req/s"
        top = best["offered"] >= max(float(p["offered"]) for p in points if p.get("offered") is not None)
        return Capacity(
            float(best["offered"]),
            unit,
            None,
            HIGHEST_PASSING_STAGE,
            f"offered load of the highest stage whose SLA verdict is pass (stage {best['stage']}, "
            f"{best['name']}): a lower bound from the sweep's grid, not a capacity search"
            + ("; it is the sweep's highest stage, so the capacity may be higher" if top else ""),
            best["stage"],
            best["name"],
            best.get("throughput_rps"),
            top,
        )
    verdicts = {p.get("sla_verdict") for p in points}
    if cap:
        why = cap.get("stopped_because") or "summary.capacity has no capacity_rps"
    elif verdicts <= {None, "none"}:
        why = "the run has no SLA rules"
    else:
        why = "no stage met the SLA"
    return Capacity(None, "", None, NO_CAPACITY, why)


def _one_point(summary: Summary) -> dict[str, Any]:
    """A single-stage run as a curve of one point (its whole measured window)."""
    load = (summary.get("conditions") or {}).get("load") or {}
    stage = StageSummary(
        index=0,
        name="whole run",
        load={"concurrency": load.get("concurrency"), "rate": load.get("rate")},
        counts=summary["counts"],
        metrics=summary["metrics"],
        sla=summary["sla"],
        steady_state=SteadyState(steady=None, throughput_change=None, in_flight_change=None, reason=None),
    )
    return dict(curve_mod.curve([stage]))
