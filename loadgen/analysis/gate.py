"""The CI gate: a candidate run against a baseline run, under a rules file, beyond the noise.

Pure: reads two saved runs and a rules file (its schema: ``config.gate_rules``). A rule fails
only when the whole bootstrap confidence interval (``loadgen.bootstrap``) lies beyond its
bound, so a difference that noise can explain never fails the build; a point estimate beyond
the bound whose interval still reaches inside it passes, flagged "within noise". Exit codes
(``GateResult.exit_code``): 0 every rule passed, 1 a regression, 2 the runs are not comparable
(see ``GATE_FIELDS``) or a rule could not be evaluated (on the baseline; a ``fidelity.*`` rule
on a candidate the built-in simulator did not serve; an ``output_agreement`` rule on a run that
kept no answers). Bad input (an unreadable run, an unknown schema version, an invalid rules
file, a rule naming a stage the runs do not have) raises ``ConfigError`` or ``ResultError``.
Rules on one stage of a multi-stage run (``stage:``) and on ``capacity_rps`` are described in
``loadgen.analysis.gate_stages``. A ``fidelity.<distribution>`` rule bounds a stat of the
candidate's ``summary.fidelity`` block (``loadgen.analysis.fidelity``) with ``max`` or ``min``,
without a bootstrap, as the capacity rule does; so do ``output_agreement`` and
``quality.accuracy``, on what the runs answered (``loadgen.analysis.gate_quality``).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from loadgen import metric_defs
from loadgen.analysis import bootstrap as bs
from loadgen.analysis import fidelity, gate_summary
from loadgen.analysis import gate_quality as gq
from loadgen.analysis import gate_repeats as gr
from loadgen.analysis import gate_stages as gs
from loadgen.analysis.condition_diff import condition_diff, matches
from loadgen.analysis.gate_result import GateResult, RuleResult
from loadgen.analysis.run_warnings import run_warnings
from loadgen.analysis.runs import load_summary, load_table
from loadgen.analysis.sla import run_failures
from loadgen.analysis.table import RecordTable
from loadgen.config.gate_rules import FIDELITY_METRICS, GateRule, GateRules, load_rules
from loadgen.errors import ConfigError, ResultError
from loadgen.summary import Summary

# GateResult and RuleResult (gate_result.py) and the rules' schema stay importable from here.
__all__ = [
    "FIDELITY_METRICS",
    "GATE_FIELDS",
    "GateResult",
    "GateRule",
    "GateRules",
    "RuleResult",
    "gate",
    "load_rules",
]

# Condition fields that must match for a gate to mean anything: what was asked (workload shape,
# lengths, load, seed), of which model, on which endpoint, and the per-request SLOs goodput
# counts against. Run length (num_requests, duration_s) may differ: the intervals account for
# the number of requests. Compare's condition diff lists everything else that differs.
GATE_FIELDS: tuple[str, ...] = (
    "profile.workload.*",
    "lengths.requested.*",
    "load.*",
    "seed",
    "target.model",
    "target.endpoint",
    *(f"profile.sla.{name}" for name in metric_defs.SLOS),
)
RUN_LENGTH_FIELDS: tuple[str, ...] = (
    "profile.workload.num_requests",
    "profile.workload.duration_s",
    "load.repeats",  # a repeated run against one run: the gate takes the spread it has
)


class _GateRun(TypedDict):
    """The fields of a ``GateResult`` that do not depend on the rules' outcome."""

    candidate: str
    baseline: str
    resamples: int
    confidence: float
    seed: int
    condition_differences: tuple[str, ...]
    failures: tuple[str, ...]
    warnings: tuple[str, ...]
    strict: bool


def gate(
    candidate: str | Path,
    baseline: str | Path,
    rules: GateRules | str | Path,
    *,
    resamples: int | None = None,
    seed: int | None = None,
    allow_different: bool = False,
    strict_conditions: bool = False,
) -> GateResult:
    """Check ``candidate`` against ``baseline`` under ``rules`` (a GateRules or a YAML path).
    The result carries the warnings ``compare`` would print about the two runs; with
    ``strict_conditions`` any of them fails the gate (exit 1, "failed on conditions")."""
    source = None if isinstance(rules, GateRules) else str(rules)
    if not isinstance(rules, GateRules):
        rules = load_rules(rules)
    cfg = rules.bootstrap
    resamples = cfg.resamples if resamples is None else resamples
    seed = cfg.seed if seed is None else seed
    if resamples < 100:
        raise ConfigError([f"resamples: must be >= 100, got {resamples}"], what="gate rules")
    runs = _Runs.load(candidate, baseline, {r.metric for r in rules.rules})
    cand_s, base_s = runs.summaries["candidate"], runs.summaries["baseline"]
    diff = condition_diff([base_s.get("conditions") or {}, cand_s.get("conditions") or {}])
    blocking = tuple(
        d.field for d in diff if matches(d.field, GATE_FIELDS) and not matches(d.field, RUN_LENGTH_FIELDS)
    )
    common = _GateRun(
        candidate=runs.names[0],
        baseline=runs.names[1],
        resamples=resamples,
        confidence=cfg.confidence,
        seed=seed,
        condition_differences=tuple(d.field for d in diff),
        failures=run_failures(candidate=cand_s, baseline=base_s),
        warnings=tuple(run_warnings(list(runs.names), [cand_s, base_s], diff)),
        strict=strict_conditions,
    )
    stages = gs.resolve_stages([(r.stage, r.text()) for r in rules.rules], cand_s, base_s, source)
    if blocking and not allow_different:
        return GateResult(results=(), not_comparable=blocking, **common)
    draw = _Draw(resamples, cfg.confidence, seed)
    results = tuple(_evaluate(rule, st, runs, draw) for rule, st in zip(rules.rules, stages))
    return GateResult(results=results, allowed_differences=blocking, **common)


@dataclass(frozen=True)
class _Draw:
    """How the bootstrap resamples: how many times, the interval's confidence, the seed."""

    resamples: int
    confidence: float
    seed: int


@dataclass
class _Runs:
    """The two runs a gate compares (roles "candidate" and "baseline"): their paths, summaries
    and names, and the bootstrap's inputs of each (per stage), built on first use."""

    paths: dict[str, str | Path]
    summaries: dict[str, Summary]
    names: tuple[str, str]
    wanted: set[str]  # the rules' metrics: RunSamples builds the inter-token gaps only if asked
    tables: dict[str, RecordTable] = field(default_factory=dict)
    cache: dict[tuple[str, int | None], bs.RunSamples] = field(default_factory=dict)

    @classmethod
    def load(cls, candidate: str | Path, baseline: str | Path, wanted: set[str]) -> _Runs:
        """The two runs' summaries; ``ResultError`` for an incomplete one (its numbers describe
        a shorter run than was asked for)."""
        cand_s, base_s = load_summary(candidate), load_summary(baseline)
        names = (cand_s.get("run_id") or Path(candidate).name, base_s.get("run_id") or Path(baseline).name)
        for role, s, name in (("candidate", cand_s, names[0]), ("baseline", base_s, names[1])):
            if s.get("complete") is False:
                raise ResultError(
                    f"the {role} run {name} is incomplete ({s.get('incomplete_reason')}); "
                    f"gate complete runs only: run it again to the end"
                )
        paths = {"candidate": candidate, "baseline": baseline}
        return cls(paths, {"candidate": cand_s, "baseline": base_s}, names, wanted)

    def samples(self, role: str, stage: int | None) -> bs.RunSamples:
        """The bootstrap's inputs of ``role``'s run, or of one stage of it."""
        if (role, stage) not in self.cache:
            path = self.paths[role]
            summary: Mapping[str, Any] = self.summaries[role]
            if role not in self.tables:
                table = load_table(path)
                self.tables[role] = table if bs.needs_gaps(self.wanted) else table.without_chunks()
            table = self.tables[role]
            if stage is not None:
                table = table.select(table.column("stage") == stage)
                summary = gs.stage_summary(summary, stage)
            self.cache[role, stage] = bs.RunSamples.from_run(table, summary, self.wanted)
        return self.cache[role, stage]


def _evaluate(rule: GateRule, st: gs.Resolved | None, runs: _Runs, draw: _Draw) -> RuleResult:
    """One rule's result: by its kind of metric, the stage it names resolved in each run (``st``)."""
    cand_s, base_s = runs.summaries["candidate"], runs.summaries["baseline"]
    if rule.metric == gs.CAPACITY:
        return _check_capacity(rule, cand_s, base_s)
    if rule.metric in FIDELITY_METRICS:
        return _check_fidelity(rule, cand_s, base_s)
    if rule.metric in gq.METRICS:
        return RuleResult(
            rule,
            *gq.check(rule, runs.paths["candidate"], runs.paths["baseline"], cand_s, base_s),
        )
    if not metric_defs.get(rule.metric).resampled:
        return gate_summary.check(rule, cand_s, base_s, st)
    if st is None:
        repeated = _check_repeats(rule, runs, draw)
        if repeated is not None:
            return repeated
    c_idx, b_idx = (None, None) if st is None else (st[0][0], st[1][0])
    where = "" if st is None else f" in stage {st[0][0]} ({st[0][1]})"
    cand, base = runs.samples("candidate", c_idx), runs.samples("baseline", b_idx)
    res = _check(rule, cand, base, draw.resamples, draw.confidence, draw.seed, where)
    return res if st is None else replace(res, stage=st[0])


def _check_repeats(rule: GateRule, runs: _Runs, draw: _Draw) -> RuleResult | None:
    """A rule on a candidate with repeats, judged on their spread (``gate_repeats``); None when
    the candidate has none (the bootstrap judges it)."""
    cand_dirs = gr.repeat_dirs(runs.paths["candidate"], runs.summaries["candidate"])
    if cand_dirs is None:
        return None
    cand = gr.repeat_values(cand_dirs, rule.metric, rule.stat, runs.wanted)
    base_dirs = gr.repeat_dirs(runs.paths["baseline"], runs.summaries["baseline"])
    base: list[float] | float | None
    if base_dirs is not None:
        base = gr.repeat_values(base_dirs, rule.metric, rule.stat, runs.wanted)
    else:
        one = bs.statistic(runs.samples("baseline", None), rule.metric, rule.stat)
        base = None if np.isnan(one) else one
    return RuleResult(rule, *gr.check(rule, cand, base, draw.confidence), method="repeats")


def _check_capacity(rule: GateRule, cand_s: Summary, base_s: Summary) -> RuleResult:
    """A ``capacity_rps`` rule: the runs' summary.capacity, no bootstrap (see ``gate_stages``)."""
    return RuleResult(rule, *gs.check_capacity(rule.relative, *rule.limit(), cand_s, base_s), method="none")


def _check_fidelity(rule: GateRule, cand_s: Summary, base_s: Summary) -> RuleResult:
    """A ``fidelity.*`` rule: the candidate's summary value against an absolute bound, no
    bootstrap (the block keeps no per-request samples). The baseline's value is shown only. A
    candidate without the block cannot be judged: an error (exit 2), not a regression."""
    name = rule.metric.removeprefix(fidelity.PREFIX)
    base, cand = fidelity.lookup(base_s, name, rule.stat), fidelity.lookup(cand_s, name, rule.stat)
    if not isinstance(cand_s.get("fidelity"), dict):
        msg = "the candidate has no fidelity block: it was not served by the built-in simulator"
        return RuleResult(rule, "error", base, None, None, False, msg)
    if cand is None:
        msg = f"the candidate's fidelity block has no {name} samples (no streamed request was matched)"
        return RuleResult(rule, "fail", base, None, None, False, msg)
    op, limit = rule.limit()
    failed = cand > limit if op == "<=" else cand < limit
    unit = "" if rule.stat == "count" else " ms"
    msg = (
        f"summary.fidelity.{name}.{rule.stat} of the candidate {cand:.4g}{unit}, bound {op} "
        f"{limit:.4g}; not resampled: " + ("beyond the bound" if failed else "within the bound")
    )
    return RuleResult(rule, "fail" if failed else "pass", base, cand, None, False, msg)


def _check(
    rule: GateRule,
    cand: bs.RunSamples,
    base: bs.RunSamples,
    resamples: int,
    confidence: float,
    seed: int,
    where: str = "",
) -> RuleResult:
    # One generator per rule, seeded by the rule's text: a rule's interval does not change
    # when other rules are added, removed or reordered.
    rng = np.random.default_rng([seed, zlib.crc32(rule.text().encode())])
    c_val = bs.statistic(cand, rule.metric, rule.stat)
    b_val = bs.statistic(base, rule.metric, rule.stat)
    shown = (None if np.isnan(b_val) else b_val), (None if np.isnan(c_val) else c_val)
    if rule.relative and np.isnan(b_val):
        msg = f"the baseline has no {rule.metric} data{where}: cannot compare against it"
        return RuleResult(rule, "error", *shown, None, False, msg)
    if np.isnan(c_val):
        msg = f"the candidate has no {rule.metric} data{where} (no successful requests?)"
        return RuleResult(rule, "fail", *shown, None, False, msg)
    iv = bs.bootstrap(
        cand,
        base if rule.relative else None,
        rule.metric,
        rule.stat,
        resamples=resamples,
        confidence=confidence,
        rng=rng,
    )
    op, limit = rule.limit()
    if op == "<=":
        failed, beyond = iv.low > limit, iv.estimate > limit
    else:
        failed, beyond = iv.high < limit, iv.estimate < limit
    noise = beyond and not failed
    what = "ratio candidate/baseline" if rule.relative else "candidate"
    msg = (
        f"{what} {iv.estimate:.4g}, {confidence:.0%} CI [{iv.low:.4g}, {iv.high:.4g}], "
        f"bound {op} {limit:.4g}: "
    )
    msg += (
        "the whole interval is beyond the bound"
        if failed
        else "beyond the bound but within noise (the interval reaches inside it)"
        if noise
        else "within the bound"
    )
    return RuleResult(rule, "fail" if failed else "pass", *shown, iv, noise, msg)
