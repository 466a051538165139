"""The SLA a profile sets: per-request SLOs (goodput) and run-level rules (pass/fail).

A rule is one string, ``'[stat] metric op threshold'``; which metrics and stats it may name
come from the metric registry, so the rules accept exactly what ``analysis/sla.py`` evaluates.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from loadgen import metric_defs
from loadgen.config.base import StrictModel

STATS = metric_defs.RULE_STATS
_RULE = re.compile(
    r"^\s*(?:(?P<stat>[a-z0-9_.]+)\s+)?(?P<metric>[a-z][a-z0-9_]*)\s*"
    r"(?P<op><=|>=|<|>)\s*(?P<threshold>[-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*$"
)
RULE_GRAMMAR = (
    "'[stat] metric op threshold', e.g. 'p99 ttft_ms < 700' or 'error_rate < 0.01'; "
    f"stat: {', '.join(STATS)}; op: <, <=, >, >="
)


class SlaRule(StrictModel):
    """A run-level pass/fail rule on a percentile (or a run scalar), written as one string."""

    metric: str
    stat: str | None = None
    op: Literal["<", "<=", ">", ">="]
    threshold: float

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        m = _RULE.match(v)
        if not m:
            raise ValueError(f"cannot parse rule {v!r}; grammar: {RULE_GRAMMAR}")
        return m.groupdict()

    @field_validator("stat", mode="before")
    @classmethod
    def _dotted(cls, v: Any) -> Any:
        """'p99.9' is 'p99_9' (as the SLA evaluation reads it)."""
        return v.replace(".", "_") if isinstance(v, str) else v

    @model_validator(mode="after")
    def _known(self):
        d = metric_defs.BY_NAME.get(self.metric)
        if d is None:
            raise ValueError(f"unknown metric {self.metric!r}; valid: {', '.join(metric_defs.NAMES)}")
        if d.kind == "distribution":
            if self.stat not in STATS:
                raise ValueError(
                    f"{self.metric} needs a stat, one of {', '.join(STATS)} "
                    f"(got {self.stat!r}); grammar: {RULE_GRAMMAR}"
                )
        elif self.stat is not None:
            raise ValueError(
                f"{self.metric} is a run-level number and takes no stat "
                f"(write '{self.metric} {self.op} {self.threshold:g}')"
            )
        return self

    def text(self) -> str:
        """The rule as written: 'p99 ttft_ms < 700'."""
        head = f"{self.stat} {self.metric}" if self.stat else self.metric
        return f"{head} {self.op} {self.threshold:g}"


class SlaConfig(StrictModel):
    """Per-request SLOs (for goodput) and run-level rules (for the pass/fail verdict)."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)
    rules: tuple[SlaRule, ...] = ()
    # Failed / (ok + failed) above which every verdict fails, whatever the latency rules say:
    # percentiles are of the ok requests, so without it a run with most requests failed could
    # pass. 1.0 turns it off.
    max_error_rate: float = Field(0.01, ge=0, le=1)
