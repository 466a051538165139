"""The SLA a profile sets: per-request SLOs (goodput) and run-level rules (pass/fail).

A rule is one string, ``'[stat] metric op threshold'``; which metrics and stats it may name
come from the metric registry, so the rules accept exactly what ``analysis/sla.py`` evaluates.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from loadgen.config.base import StrictModel

REQUEST_METRICS = ("ttft_ms", "ttfb_ms", "itl_ms", "itl_per_token_ms", "tpot_ms", "e2e_ms",
                   "client_lag_ms")
RUN_METRICS = ("error_rate", "request_throughput_rps", "output_tokens_per_s", "goodput_rps")
STATS = ("p50", "p90", "p95", "p99", "p99_9", "mean", "max", "min")
_RULE = re.compile(r"^\s*(?:(?P<stat>[a-z0-9_.]+)\s+)?(?P<metric>[a-z_]+)\s*"
                   r"(?P<op><=|>=|<|>)\s*(?P<threshold>[-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*$")
RULE_GRAMMAR = ("'[stat] metric op threshold', e.g. 'p99 ttft_ms < 700' or 'error_rate < 0.01'; "
                f"stat: {', '.join(STATS)}; op: <, <=, >, >=")


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
        d = m.groupdict()
        d["stat"] = d["stat"] and d["stat"].replace("p99.9", "p99_9")
        return d

    @model_validator(mode="after")
    def _known(self):
        if self.metric in REQUEST_METRICS:
            if self.stat not in STATS:
                raise ValueError(f"{self.metric} needs a stat, one of {', '.join(STATS)} "
                                 f"(got {self.stat!r}); grammar: {RULE_GRAMMAR}")
        elif self.metric in RUN_METRICS:
            if self.stat is not None:
                raise ValueError(f"{self.metric} is a run-level number and takes no stat "
                                 f"(write '{self.metric} {self.op} {self.threshold:g}')")
        else:
            raise ValueError(f"unknown metric {self.metric!r}; valid: "
                             f"{', '.join(REQUEST_METRICS + RUN_METRICS)}")
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

