"""Render a GateResult: Markdown for a CI step summary, JUnit XML (one testcase per rule), JSON.

A stage rule is shown with its stage by index and name (``RuleResult.label``); a
``capacity_rps`` rule's interval is the capacities' 95% CIs, not a bootstrap, and its table
row is followed by a line saying what was compared; so is a ``fidelity.*`` rule's (the
candidate's summary.fidelity value against an absolute bound, not resampled)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

from loadgen import metric_defs
from loadgen.analysis.gate import FIDELITY_METRICS, GateResult, RuleResult
from loadgen.analysis.gate_stages import CAPACITY
from loadgen.report.compare import fmt

_ICON = {"pass": "✅ pass", "fail": "❌ FAIL", "error": "⚠️ error"}


def _pct(ratio: float) -> str:
    if math.isinf(ratio):
        return "+∞"
    return f"{ratio - 1:+.1%}"


def _cells(r: RuleResult) -> tuple[str, str, str]:
    """(estimate, interval, bound) as shown: % change for relative rules, values for absolute."""
    op, limit = r.rule.limit()
    sign = "≤" if op == "<=" else "≥"
    iv = r.interval
    if r.rule.relative:
        bound = f"{sign} {_pct(limit)}"
        if iv is None and r.baseline and r.candidate is not None and r.rule.metric == CAPACITY:
            return _pct(r.candidate / r.baseline), "—", bound  # no ci95 on both: point values
        if iv is None:
            return "—", "—", bound
        return _pct(iv.estimate), f"[{_pct(iv.low)}, {_pct(iv.high)}]", bound
    bound = f"{sign} {fmt(limit)}"
    if iv is None:
        return "—", "—", bound
    return fmt(iv.estimate), f"[{fmt(iv.low)}, {fmt(iv.high)}]", bound


def markdown(res: GateResult) -> str:
    """The gate's result as Markdown: the verdict, why the runs are not comparable (then nothing
    else), the warnings, the rules' table and the notes on its kinds of rules."""
    icon = {"pass": "✅", "regression": "❌", "failed on conditions": "❌", "not comparable": "⚠️"}[
        res.verdict
    ]
    lines = [f"## loadgen gate {icon} {res.verdict}: {res.candidate} vs baseline {res.baseline}", ""]
    if res.not_comparable:
        lines += [
            "The runs are not comparable; these conditions differ (rerun with the same "
            "profile, or pass `--allow-different` to gate anyway):",
            "",
        ]
        lines += [f"- `{f}`" for f in res.not_comparable]
        return "\n".join(lines) + "\n"
    lines += _warnings(res) + _rules_table(res) + _rule_notes(res)
    return "\n".join(lines) + "\n"


def _warnings(res: GateResult) -> list[str]:
    """Gated although conditions differ; failed requests the latency figures leave out."""
    lines: list[str] = []
    if res.warnings:
        how = (
            "these fail the gate (`--strict-conditions`)"
            if res.strict
            else "the gate does not fail on them; `--strict-conditions` would"
        )
        lines += [f"> **Warning ({how}):**", *(f"> - {w}" for w in res.warnings), ""]
    if res.allowed_differences:
        lines += [
            "> **Warning:** gated with `--allow-different` although these conditions differ: "
            + ", ".join(f"`{f}`" for f in res.allowed_differences),
            "",
        ]
    if res.failures:
        lines += [
            "> **Failed requests** (latency figures below are of the ok requests only): "
            + "; ".join(res.failures),
            "",
        ]
    return lines


def _rules_table(res: GateResult) -> list[str]:
    """How the intervals were drawn, one table row per rule, and how many rules passed."""
    lines = [
        f"Bootstrap: {res.resamples} resamples, {res.confidence:.0%} confidence interval, "
        f"seed {res.seed}; requests resampled with replacement within each run. A rule fails "
        "only when the whole interval is beyond its bound.",
        "",
        f"| | rule | baseline | candidate | change | {res.confidence:.0%} CI | bound | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res.results:
        est, ci, bound = _cells(r)
        note = (
            "within noise"
            if r.within_noise
            else ""
            if r.status == "pass"
            else r.message
            if r.interval is None
            else "regression"
        )
        if not r.rule.relative:
            est = "—"
        lines.append(
            f"| {_ICON[r.status]} | `{r.label}` | {fmt(r.baseline)} | "
            f"{fmt(r.candidate)} | {est} | {ci} | {bound} | {note} |"
        )
    failed = sum(r.status != "pass" for r in res.results)
    lines += ["", f"{len(res.results) - failed} of {len(res.results)} rules passed."]
    repeated = [r for r in res.results if r.method == "repeats"]
    if repeated:
        lines += [
            "",
            "Judged on the repeats' spread, not the bootstrap (the candidate has repeats; each "
            "repeat's figure from its own requests, a t interval over the repeats):",
            "",
        ]
        lines += [f"- `{r.label}`: {r.message}" for r in repeated]
    return lines


# The registry's metrics a gate judges on the summaries' values (``analysis.gate_summary``).
UNRESAMPLED = frozenset(d.name for d in metric_defs.METRICS if d.gate and not d.resampled)


def _rule_notes(res: GateResult) -> list[str]:
    """What a stage rule, a ``capacity_rps`` rule, a GPU energy rule and a ``fidelity.*`` rule
    compared."""
    lines: list[str] = []
    if any(r.stage is not None for r in res.results):
        lines += [
            "",
            "A rule with a stage resamples that stage's requests only, over that stage's own "
            "window and load.",
        ]
    capacity = [r for r in res.results if r.rule.metric == CAPACITY]
    if capacity:
        lines += [
            "",
            "`capacity_rps` rules (summary.capacity, not resampled; CI = the capacities' 95% CIs):",
            "",
        ]
        lines += [f"- `{r.label}`: {r.message}" for r in capacity]
    energy = [r for r in res.results if r.method == "none" and r.rule.metric in UNRESAMPLED]
    if energy:
        lines += [
            "",
            "GPU energy rules (summary.telemetry.energy, a stage's for a stage rule: one energy "
            "counter difference per run, compared as it is, not resampled):",
            "",
        ]
        lines += [f"- `{r.label}`: {r.message}" for r in energy]
    measured = [r for r in res.results if r.rule.metric in FIDELITY_METRICS]
    if measured:
        lines += [
            "",
            "`fidelity.*` rules (summary.fidelity: the client's timestamp error against the built-in "
            "simulator's ground truth; the candidate's value against an absolute bound, not resampled):",
            "",
        ]
        lines += [f"- `{r.label}`: {r.message}" for r in measured]
    return lines


def junit_xml(res: GateResult) -> str:
    """JUnit XML in the common Jenkins/Ant form: testsuites > testsuite > testcase
    (> failure | error), so any CI system lists each rule as a test case."""
    cases = res.results
    failures = sum(r.status == "fail" for r in cases) + (1 if res.warned_strictly else 0)
    errors = sum(r.status == "error" for r in cases) + (1 if res.not_comparable else 0)
    tests = len(cases) + (1 if res.not_comparable else 0) + (1 if res.warnings else 0)
    counts = {"tests": str(tests), "failures": str(failures), "errors": str(errors)}
    suites = ET.Element("testsuites", {"name": "loadgen gate", **counts})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {"name": f"loadgen gate: {res.candidate} vs {res.baseline}", **counts, "skipped": "0", "time": "0"},
    )
    props = ET.SubElement(suite, "properties")
    for k, v in (
        ("candidate", res.candidate),
        ("baseline", res.baseline),
        ("resamples", res.resamples),
        ("confidence", res.confidence),
        ("seed", res.seed),
    ):
        ET.SubElement(props, "property", name=k, value=str(v))
    if res.not_comparable:
        case = ET.SubElement(
            suite, "testcase", name="runs are comparable", classname="loadgen.gate", time="0"
        )
        err = ET.SubElement(
            case, "error", type="NotComparable", message="conditions differ: " + ", ".join(res.not_comparable)
        )
        err.text = "\n".join(res.not_comparable)
    if res.warnings:  # what compare warns about: a failure under --strict-conditions, else said
        case = ET.SubElement(suite, "testcase", name="runs' conditions", classname="loadgen.gate", time="0")
        if res.strict:
            el = ET.SubElement(case, "failure", type="Conditions", message="; ".join(res.warnings))
            el.text = "\n".join(res.warnings)
        else:
            ET.SubElement(case, "system-out").text = "warnings:\n" + "\n".join(res.warnings)
    for r in cases:
        case = ET.SubElement(suite, "testcase", name=r.label, classname="loadgen.gate", time="0")
        if r.status == "fail":
            el = ET.SubElement(case, "failure", type="Regression", message=r.message)
            el.text = _detail(r)
        elif r.status == "error":
            el = ET.SubElement(case, "error", type="CannotEvaluate", message=r.message)
            el.text = _detail(r)
        else:
            ET.SubElement(case, "system-out").text = _detail(r)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _detail(r: RuleResult) -> str:
    return f"baseline {fmt(r.baseline)}, candidate {fmt(r.candidate)}; {r.message}"


def to_dict(res: GateResult) -> dict[str, Any]:
    def num(x: Any) -> Any:
        return None if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) else x

    return {
        "candidate": res.candidate,
        "baseline": res.baseline,
        "verdict": res.verdict,
        "exit_code": res.exit_code,
        "resamples": res.resamples,
        "confidence": res.confidence,
        "seed": res.seed,
        "not_comparable": list(res.not_comparable),
        "allowed_differences": list(res.allowed_differences),
        "condition_differences": list(res.condition_differences),
        "failures": list(res.failures),
        "warnings": list(res.warnings),
        "strict_conditions": res.strict,
        "rules": [
            {
                "rule": r.rule.text(),
                "label": r.label,
                "metric": r.rule.metric,
                "stat": r.rule.stat,
                "stage": None if r.stage is None else {"index": r.stage[0], "name": r.stage[1]},
                "bound": r.rule.bound,
                "limit": list(r.rule.limit()),
                "status": r.status,
                "baseline": num(r.baseline),
                "candidate": num(r.candidate),
                "estimate": num(r.interval.estimate) if r.interval else None,
                "interval": [num(r.interval.low), num(r.interval.high)] if r.interval else None,
                "within_noise": r.within_noise,
                "interval_method": r.method,
                "message": r.message,
            }
            for r in res.results
        ],
    }
