"""What a gate returns: each rule's result (``RuleResult``) and the verdict over them
(``GateResult``, with the exit code the CLI ends with). ``loadgen.analysis.gate`` computes them
and re-exports both; ``loadgen.report.gate`` renders them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.analysis.bootstrap import Interval
from loadgen.config.gate_rules import GateRule


@dataclass(frozen=True)
class RuleResult:
    """One rule judged: its status, the statistic in each run, and why."""

    rule: GateRule
    status: str  # "pass" | "fail" | "error"
    baseline: float | None  # the statistic in each run, as measured
    candidate: float | None
    interval: Interval | None  # of candidate/baseline (relative rules) or of candidate
    within_noise: bool  # the estimate is beyond the bound but the interval is not wholly
    message: str
    stage: tuple[int, str] | None = None  # (index, name) in the candidate of a stage rule's stage
    # Which interval judged it: "bootstrap" (the requests, resampled), "repeats" (the spread of
    # repeated runs: analysis.gate_repeats), or "none" (a summary value, not resampled).
    method: str = "bootstrap"

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
    """Every rule's result, or the condition fields that made the runs not comparable."""

    candidate: str
    baseline: str
    results: tuple[RuleResult, ...]
    resamples: int
    confidence: float
    seed: int
    not_comparable: tuple[str, ...] = ()  # differing gate.GATE_FIELDS when the gate refused
    allowed_differences: tuple[str, ...] = ()  # those let through by allow_different
    condition_differences: tuple[str, ...] = field(default=())
    failures: tuple[str, ...] = field(default=())  # "candidate: 48 of 80 requests failed (...)"
    # What compare would warn about these runs (analysis/run_warnings.py): said in every output;
    # with ``strict`` (--strict-conditions) a warning fails the gate.
    warnings: tuple[str, ...] = field(default=())
    strict: bool = False

    @property
    def exit_code(self) -> int:
        if self.not_comparable or any(r.status == "error" for r in self.results):
            return 2
        return 1 if self.regressed or self.warned_strictly else 0

    @property
    def regressed(self) -> bool:
        return any(r.status == "fail" for r in self.results)

    @property
    def warned_strictly(self) -> bool:
        """--strict-conditions and a warning: the gate fails on the runs' conditions."""
        return self.strict and bool(self.warnings)

    @property
    def verdict(self) -> str:
        if self.exit_code == 1 and not self.regressed:
            return "failed on conditions"
        return {0: "pass", 1: "regression", 2: "not comparable"}[self.exit_code]
