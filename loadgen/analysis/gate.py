"""The CI gate: a candidate run against a baseline run, under a rules file, beyond the noise.

Pure: reads two saved runs and a YAML rules file. A rule fails only when the whole bootstrap
confidence interval (``loadgen.bootstrap``) lies beyond its bound, so a difference that noise
can explain never fails the build; a point estimate beyond the bound whose interval still
reaches inside it passes, flagged "within noise". Exit codes (``GateResult.exit_code``):
0 every rule passed, 1 a regression, 2 the runs are not comparable (see ``GATE_FIELDS``) or
a rule could not be evaluated (on the baseline; a ``fidelity.*`` rule on a candidate the built-in
simulator did not serve; an ``output_agreement`` rule on a run that kept no answers). Bad input
(an unreadable run, an unknown schema version, an invalid rules file, a rule naming a stage the
runs do not have) raises ``ConfigError`` or ``ResultError``. Rules on one stage of a multi-stage
run (``stage:``) and on ``capacity_rps`` are described in ``loadgen.analysis.gate_stages``. A
``fidelity.<distribution>`` rule bounds a stat of the candidate's ``summary.fidelity`` block
(``loadgen.analysis.fidelity``) with ``max`` or ``min``, without a bootstrap, as the capacity
rule does; so do ``output_agreement`` and ``quality.accuracy``, on what the runs answered
(``loadgen.analysis.gate_quality``).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from loadgen import metric_defs
from loadgen.analysis import bootstrap as bs
from loadgen.analysis import fidelity
from loadgen.analysis import gate_quality as gq
from loadgen.analysis import gate_stages as gs
from loadgen.analysis.compare import condition_diff, matches
from loadgen.analysis.runs import load_summary, load_table
from loadgen.analysis.sla import run_failures
from loadgen.analysis.table import RecordTable
from loadgen.config import StrictLoader
from loadgen.config.base import StrictModel
from loadgen.config.messages import render_validation_error, yaml_error_problem
from loadgen.errors import ConfigError, ResultError

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
    "profile.sla.ttft_ms",
    "profile.sla.tpot_ms",
    "profile.sla.e2e_ms",
)
RUN_LENGTH_FIELDS: tuple[str, ...] = ("profile.workload.num_requests", "profile.workload.duration_s")
RELATIVE_BOUNDS = ("max_regression", "min_ratio", "max_ratio")  # against the baseline's value
BOUNDS = (*RELATIVE_BOUNDS, "max", "min")
# The names a fidelity rule may bound: "fidelity.first_token_lag_ms", ...
FIDELITY_METRICS: tuple[str, ...] = tuple(fidelity.PREFIX + name for name in fidelity.FIELDS)
_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")


class GateRule(StrictModel):
    """One bound on one statistic. Exactly one of the bounds is set:
    ``max_regression`` (relative, "10%" or 0.10: worse by at most that much; worse means higher
    for latencies and error rate, lower for throughputs and goodput), ``min_ratio`` /
    ``max_ratio`` (candidate / baseline), ``max`` / ``min`` (absolute, on the candidate).
    ``stage`` (an index or a name) limits the rule to that stage of a multi-stage run;
    ``metric: capacity_rps`` bounds ``summary.capacity`` (see ``gate_stages``);
    ``metric: fidelity.<one of fidelity.FIELDS>`` with a stat of ``metric_defs.STATS`` and
    ``max`` or ``min`` bounds the candidate's ``summary.fidelity`` (``_valid_fidelity``)."""

    metric: str
    stat: str | None = None
    stage: int | str | None = None
    max_regression: float | None = Field(None, ge=0)
    min_ratio: float | None = Field(None, gt=0)
    max_ratio: float | None = Field(None, gt=0)
    max: float | None = None
    min: float | None = None

    @field_validator("max_regression", mode="before")
    @classmethod
    def _percent(cls, v: Any) -> Any:
        if isinstance(v, str):
            m = _PERCENT.match(v)
            if not m:
                raise ValueError(f"expected a percentage such as '10%' or a fraction such as 0.1, got {v!r}")
            return float(m.group(1)) / 100
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1:
            raise ValueError(f"{v!r} is ambiguous; write a percentage ('{v:g}%') or a fraction ({v / 100:g})")
        return v

    @field_validator("stage", mode="before")
    @classmethod
    def _stage(cls, v: Any) -> Any:
        good = 'a stage index (0, 1, ...) or a stage name in quotes, such as "c=8"'
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise ValueError(f"expected {good}, got {str(v).lower() if isinstance(v, bool) else repr(v)}")
        if isinstance(v, int) and v < 0:
            raise ValueError(f"{v} is not a stage index; expected {good}")
        if isinstance(v, str) and not v.strip():
            raise ValueError(f"an empty name; expected {good}")
        return v

    @model_validator(mode="after")
    def _valid(self):
        if self.metric == gs.CAPACITY:
            if self.stat is not None:
                raise ValueError(f"@stat: {gs.CAPACITY} is a run-level number and takes no stat; drop stat")
            if self.stage is not None:
                raise ValueError(
                    f"@stage: {gs.CAPACITY} is the whole run's capacity (summary.capacity); drop stage"
                )
        elif self.metric.startswith(fidelity.PREFIX):
            self._valid_fidelity()
        elif self.metric in gq.METRICS:
            gq.validate(self, RELATIVE_BOUNDS)
        else:
            self._valid_metric()
        set_ = [b for b in BOUNDS if getattr(self, b) is not None]
        if len(set_) != 1:
            raise ValueError(
                f"set exactly one bound of {', '.join(BOUNDS)} (got {', '.join(set_) or 'none'})"
            )
        return self

    def _valid_metric(self) -> None:
        d = metric_defs.BY_NAME.get(self.metric)
        valid = ", ".join([*(g.name for g in metric_defs.GATED), gs.CAPACITY, *FIDELITY_METRICS, *gq.METRICS])
        if d is None:
            raise ValueError(f"@metric: unknown metric {self.metric!r}; valid: {valid}")
        if not d.gate:
            raise ValueError(
                f"@metric: {self.metric} is not resampled by the bootstrap, so a "
                f"gate rule cannot bound it; valid: {valid}"
            )
        if d.kind == "distribution":
            if self.stat not in bs.STATS:
                raise ValueError(
                    f"@stat: {self.metric} needs a stat, one of {', '.join(bs.STATS)} (got {self.stat!r})"
                )
        elif self.stat is not None:
            raise ValueError(f"@stat: {self.metric} is a run-level number and takes no stat")

    def _valid_fidelity(self) -> None:
        """Why only ``max`` / ``min``: the block holds one summary per run and no per-request
        samples, so there is nothing to resample; and its lags and errors sit a fraction of a
        millisecond from zero (errors can be negative), where a ratio to the baseline's value
        is noise, not a regression."""
        if self.metric not in FIDELITY_METRICS:
            valid = ", ".join(FIDELITY_METRICS)
            raise ValueError(f"@metric: unknown fidelity distribution {self.metric!r}; valid: {valid}")
        if self.stat not in metric_defs.STATS:
            stats = ", ".join(metric_defs.STATS)
            raise ValueError(f"@stat: {self.metric} needs a stat, one of {stats} (got {self.stat!r})")
        if self.stage is not None:
            raise ValueError(f"@stage: {self.metric} is the whole run's (summary.fidelity); drop stage")
        for bound in RELATIVE_BOUNDS:
            if getattr(self, bound) is not None:
                raise ValueError(
                    f"@{bound}: {self.stat} {self.metric} takes an absolute bound on the candidate "
                    f"(max or min), not one relative to the baseline: its values sit near zero, where "
                    f"a ratio is noise; write e.g. {{metric: {self.metric}, stat: {self.stat}, max: 1}}"
                )

    @property
    def bound(self) -> str:
        return next(b for b in BOUNDS if getattr(self, b) is not None)

    @property
    def relative(self) -> bool:
        return self.bound in RELATIVE_BOUNDS

    def text(self) -> str:
        head = f"{self.stat} {self.metric}" if self.stat else self.metric
        value = getattr(self, self.bound)
        shown = f"{value * 100:g}%" if self.bound == "max_regression" else f"{value:g}"
        at = "" if self.stage is None else f" at stage {gs.stage_ref(self.stage)}"
        return f"{head} {self.bound} {shown}{at}"

    def limit(self) -> tuple[str, float]:
        """The bound on the estimate (a ratio for relative rules): ("<=" | ">=", value)."""
        v = float(getattr(self, self.bound))
        if self.bound == "max_regression":
            better = self.metric == gs.CAPACITY or metric_defs.get(self.metric).higher_is_better
            return (">=", 1 - v) if better else ("<=", 1 + v)
        return {"min_ratio": (">=", v), "max_ratio": ("<=", v), "max": ("<=", v), "min": (">=", v)}[
            self.bound
        ]


class BootstrapConfig(StrictModel):
    resamples: int = Field(2000, ge=100)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    seed: int = 0


class GateRules(StrictModel):
    rules: tuple[GateRule, ...] = Field(min_length=1)
    bootstrap: BootstrapConfig = BootstrapConfig()


def load_rules(path: str | Path) -> GateRules:
    """Read and validate a rules file; ``ConfigError`` names each problem's YAML path."""
    source = str(path)
    try:
        data = yaml.load(Path(path).read_text(), Loader=StrictLoader)
    except OSError as exc:
        raise ConfigError(
            [f"cannot read rules file: {exc.strerror or exc}"], source, what="gate rules"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_error_problem(exc)], source, what="gate rules") from None
    try:
        return GateRules.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(render_validation_error(exc, GateRules), source, what="gate rules") from None


@dataclass(frozen=True)
class RuleResult:
    rule: GateRule
    status: str  # "pass" | "fail" | "error"
    baseline: float | None  # the statistic in each run, as measured
    candidate: float | None
    interval: bs.Interval | None  # of candidate/baseline (relative rules) or of candidate
    within_noise: bool  # the estimate is beyond the bound but the interval is not wholly
    message: str
    stage: tuple[int, str] | None = None  # (index, name) in the candidate of a stage rule's stage

    @property
    def label(self) -> str:
        """The rule as shown: its text, a stage rule's stage by index and name."""
        if self.stage is None:
            return self.rule.text()
        return (
            self.rule.model_copy(update={"stage": None}).text()
            + f" at stage {self.stage[0]} ({self.stage[1]})"
        )


@dataclass(frozen=True)
class GateResult:
    candidate: str
    baseline: str
    results: tuple[RuleResult, ...]
    resamples: int
    confidence: float
    seed: int
    not_comparable: tuple[str, ...] = ()  # differing GATE_FIELDS when the gate refused
    allowed_differences: tuple[str, ...] = ()  # differing GATE_FIELDS let through by allow_different
    condition_differences: tuple[str, ...] = field(default=())
    failures: tuple[str, ...] = field(default=())  # "candidate: 48 of 80 requests failed (...)"

    @property
    def exit_code(self) -> int:
        if self.not_comparable or any(r.status == "error" for r in self.results):
            return 2
        return 1 if any(r.status == "fail" for r in self.results) else 0

    @property
    def verdict(self) -> str:
        return {0: "pass", 1: "regression", 2: "not comparable"}[self.exit_code]


class _GateRun(TypedDict):
    """The fields of a ``GateResult`` that do not depend on the rules' outcome."""

    candidate: str
    baseline: str
    resamples: int
    confidence: float
    seed: int
    condition_differences: tuple[str, ...]
    failures: tuple[str, ...]


def gate(
    candidate: str | Path,
    baseline: str | Path,
    rules: GateRules | str | Path,
    *,
    resamples: int | None = None,
    seed: int | None = None,
    allow_different: bool = False,
) -> GateResult:
    """Check ``candidate`` against ``baseline`` under ``rules`` (a GateRules or a YAML path)."""
    source = None if isinstance(rules, GateRules) else str(rules)
    if not isinstance(rules, GateRules):
        rules = load_rules(rules)
    cfg = rules.bootstrap
    resamples = cfg.resamples if resamples is None else resamples
    seed = cfg.seed if seed is None else seed
    if resamples < 100:
        raise ConfigError([f"resamples: must be >= 100, got {resamples}"], what="gate rules")
    cand_s, base_s = load_summary(candidate), load_summary(baseline)
    names = (cand_s.get("run_id") or Path(candidate).name, base_s.get("run_id") or Path(baseline).name)
    for role, s, name in (("candidate", cand_s, names[0]), ("baseline", base_s, names[1])):
        if s.get("complete") is False:  # its numbers describe a shorter run than was asked for
            raise ResultError(
                f"the {role} run {name} is incomplete ({s.get('incomplete_reason')}); "
                f"gate complete runs only: run it again to the end"
            )
    diff = condition_diff([base_s.get("conditions") or {}, cand_s.get("conditions") or {}])
    blocking = tuple(
        d.field for d in diff if matches(d.field, GATE_FIELDS) and not matches(d.field, RUN_LENGTH_FIELDS)
    )
    common = _GateRun(
        candidate=names[0],
        baseline=names[1],
        resamples=resamples,
        confidence=cfg.confidence,
        seed=seed,
        condition_differences=tuple(d.field for d in diff),
        failures=run_failures(candidate=cand_s, baseline=base_s),
    )
    stages = gs.resolve_stages([(r.stage, r.text()) for r in rules.rules], cand_s, base_s, source)
    if blocking and not allow_different:
        return GateResult(results=(), not_comparable=blocking, **common)
    runs = {"candidate": (candidate, cand_s), "baseline": (baseline, base_s)}
    tables: dict[str, RecordTable] = {}
    cache: dict[tuple[str, int | None], bs.RunSamples] = {}
    wanted = {r.metric for r in rules.rules}  # RunSamples builds the inter-token gaps only if asked
    gaps = bs.needs_gaps(wanted)

    def samples(role: str, stage: int | None) -> bs.RunSamples:
        if (role, stage) not in cache:
            path, summary = runs[role]
            if role not in tables:
                tables[role] = load_table(path) if gaps else load_table(path).without_chunks()
            table = tables[role]
            if stage is not None:
                table = table.select(table.column("stage") == stage)
                summary = gs.stage_summary(summary, stage)
            cache[role, stage] = bs.RunSamples.from_run(table, summary, wanted)
        return cache[role, stage]

    results = []
    for rule, st in zip(rules.rules, stages):
        if rule.metric == gs.CAPACITY:
            results.append(_check_capacity(rule, cand_s, base_s))
            continue
        if rule.metric in FIDELITY_METRICS:
            results.append(_check_fidelity(rule, cand_s, base_s))
            continue
        if rule.metric in gq.METRICS:
            results.append(RuleResult(rule, *gq.check(rule, candidate, baseline, cand_s, base_s)))
            continue
        c_idx, b_idx = (None, None) if st is None else (st[0][0], st[1][0])
        where = "" if st is None else f" in stage {st[0][0]} ({st[0][1]})"
        res = _check(
            rule,
            samples("candidate", c_idx),
            samples("baseline", b_idx),
            resamples,
            cfg.confidence,
            seed,
            where,
        )
        results.append(res if st is None else replace(res, stage=st[0]))
    return GateResult(results=tuple(results), allowed_differences=blocking, **common)


def _check_capacity(rule: GateRule, cand_s: dict, base_s: dict) -> RuleResult:
    """A ``capacity_rps`` rule: the runs' summary.capacity, no bootstrap (see ``gate_stages``)."""
    return RuleResult(rule, *gs.check_capacity(rule.relative, *rule.limit(), cand_s, base_s))


def _check_fidelity(rule: GateRule, cand_s: dict, base_s: dict) -> RuleResult:
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
