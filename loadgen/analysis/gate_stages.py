"""The gate's rules on one stage of a multi-stage run, and on the capacity at the SLA.

A stage rule (``stage: 2`` or ``stage: "c=8"``) names a stage by its index or its name in
``summary["stages"]``; the gate then resamples that stage's measured requests only (records
whose ``stage`` field is its index), over that stage's own window, against its own load
(closed loop or not) and SLOs. Both runs must have the stage.

A ``capacity_rps`` rule compares ``summary["capacity"]["capacity_rps"]`` (from ``loadgen
capacity``) of the two runs, with no bootstrap over requests: when both runs carry a 95%
interval (``ci95``), the ratio's interval is the conservative [cand low / base high, cand high /
base low] (an absolute bound uses the candidate's own interval), and the rule fails only when
that whole interval is beyond the bound; without both intervals the point values are compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis.bootstrap import Interval
from loadgen.config.gate_rules import CAPACITY, stage_ref
from loadgen.errors import ConfigError

__all__ = [
    "CAPACITY",
    "Resolved",
    "capacity_interval",
    "capacity_of",
    "check_capacity",
    "resolve_stage",
    "resolve_stages",
    "stage_ref",
    "stage_summary",
]


def resolve_stage(stage: int | str, summary: Mapping[str, Any], role: str) -> tuple[int, str]:
    """(index, name) of the stage ``stage`` names in ``summary``; ``ValueError`` saying what is
    wrong and what would be right when it names none."""
    stages = summary.get("stages") or []
    if not stages:
        raise ValueError(
            f"the {role} run is single-stage (its summary has no stages): drop `stage:` from "
            "this rule, or gate a run made with load.sweep or load.stages"
        )
    for s in stages:
        if (isinstance(stage, int) and s.get("index") == stage) or (
            isinstance(stage, str) and s.get("name") == stage
        ):
            return int(s["index"]), str(s.get("name"))
    valid = ", ".join(f"{s.get('index')} ({s.get('name')!r})" for s in stages)
    kind = "index" if isinstance(stage, int) else "name"
    raise ValueError(
        f"no stage with {kind} {stage_ref(stage)} in the {role} run; its stages are {valid}: "
        "name one by its index or its name"
    )


def stage_summary(summary: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The summary fields ``bootstrap.RunSamples.from_run`` reads, for stage ``index``, and its
    GPU telemetry (what ``gate_summary`` reads of a stage)."""
    block = next(s for s in summary.get("stages") or [] if s.get("index") == index)
    out = {
        "window": block.get("window") or {},
        "sla": block.get("sla") or summary.get("sla") or {},
        "conditions": {"load": block.get("load") or {}},
    }
    if "telemetry" in block:
        out["telemetry"] = block["telemetry"]
    return out


def capacity_of(summary: Mapping[str, Any]) -> tuple[float | None, tuple[float, float] | None]:
    """(capacity_rps, ci95) of a run's ``summary["capacity"]``, each None when absent."""
    cap = summary.get("capacity")
    if not isinstance(cap, Mapping) or cap.get("capacity_rps") is None:
        return None, None
    ci = cap.get("ci95")
    if isinstance(ci, Sequence) and len(ci) == 2 and None not in ci:
        return float(cap["capacity_rps"]), (float(ci[0]), float(ci[1]))
    return float(cap["capacity_rps"]), None


def capacity_interval(
    relative: bool,
    cand: tuple[float, tuple[float, float] | None],
    base: tuple[float, tuple[float, float] | None],
) -> tuple[float, tuple[float, float] | None, str]:
    """(estimate, its interval or None, what was compared) for a capacity rule: the ratio
    candidate/baseline for a relative rule, the candidate's capacity for an absolute one."""
    (c, c_ci), (b, b_ci) = cand, base

    def show(v: float, ci: tuple[float, float] | None) -> str:
        return f"{v:.4g} req/s" + (f" (95% CI [{ci[0]:.4g}, {ci[1]:.4g}])" if ci else " (no ci95)")

    if not relative:
        return c, c_ci, f"summary.capacity.capacity_rps of the candidate, {show(c, c_ci)}; no bootstrap"
    what = (
        f"summary.capacity.capacity_rps, candidate {show(c, c_ci)} over baseline {show(b, b_ci)}; "
        "no bootstrap"
    )
    estimate = c / b if b else float("inf")
    if c_ci is None or b_ci is None or b_ci[0] <= 0:
        return estimate, None, what + ", point values compared (both runs need a ci95 for an interval)"
    return estimate, (c_ci[0] / b_ci[1], c_ci[1] / b_ci[0]), what + ", interval of the ratio from both"


Resolved = tuple[tuple[int, str], tuple[int, str]]  # (index, name) in the candidate, the baseline


def resolve_stages(
    rules: Sequence[tuple[int | str | None, str]],
    cand_s: Mapping[str, Any],
    base_s: Mapping[str, Any],
    source: str | None,
) -> list[Resolved | None]:
    """Each rule's (stage, text) resolved in both runs (None: the whole run); a ``ConfigError``
    naming every rule whose stage either run does not have."""
    out: list[Resolved | None] = []
    problems = []
    for i, (stage, text) in enumerate(rules):
        try:
            out.append(
                None
                if stage is None
                else (resolve_stage(stage, cand_s, "candidate"), resolve_stage(stage, base_s, "baseline"))
            )
        except ValueError as exc:
            problems.append(f"rules[{i}].stage ({text}): {exc}")
    if problems:
        raise ConfigError(problems, source, what="gate rules")
    return out


def check_capacity(
    relative: bool, op: str, limit: float, cand_s: Mapping[str, Any], base_s: Mapping[str, Any]
) -> tuple[str, float | None, float | None, Interval | None, bool, str]:
    """A capacity rule's (status, baseline, candidate, interval, within_noise, message)."""
    (c, c_ci), (b, b_ci) = capacity_of(cand_s), capacity_of(base_s)
    if relative and b is None:
        msg = "the baseline has no summary.capacity.capacity_rps: gate against a `loadgen capacity` run"
        return "error", b, c, None, False, msg
    if c is None:
        msg = "the candidate has no summary.capacity.capacity_rps (not a `loadgen capacity` run?)"
        return "fail", b, c, None, False, msg
    estimate, ci, what = capacity_interval(relative, (c, c_ci), (b or 0.0, b_ci))
    low, high = ci or (estimate, estimate)
    failed, beyond = (high < limit, estimate < limit) if op == ">=" else (low > limit, estimate > limit)
    noise = beyond and not failed
    shown = f"{estimate:.4g}" + (f", interval [{low:.4g}, {high:.4g}]" if ci else "")
    head = "ratio candidate/baseline" if relative else "candidate"
    msg = f"{what}; {head} {shown}, bound {op} {limit:.4g}: " + (
        ("the whole interval is beyond the bound" if ci else "beyond the bound")
        if failed
        else "beyond the bound but within the capacities' intervals"
        if noise
        else "within the bound"
    )
    iv = Interval(estimate, low, high, 0) if ci else None
    return ("fail" if failed else "pass"), b, c, iv, noise, msg
