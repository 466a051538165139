"""The SLA a profile sets: per-request SLOs (goodput) and run-level rules (pass/fail).

A rule is one string, ``'[stat] metric op threshold'``, read by one grammar (``parse_rule``,
which the evaluation in ``analysis/sla.py`` also uses for a rule given as text); which metrics
and stats it may name come from the metric registry, so the rules accept exactly what
``analysis/sla.py`` evaluates. The per-request SLO fields are the registry's ``SLOS``.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from pydantic import Field, create_model, field_validator, model_validator

from loadgen import metric_defs
from loadgen.config.base import StrictModel, field_msg

STATS = metric_defs.RULE_STATS
Op = Literal["<", "<=", ">", ">="]
_RULE = re.compile(
    r"^\s*(?:(?P<stat>[a-z0-9_.]+)\s+)?(?P<metric>[a-z][a-z0-9_]*)\s*"
    r"(?P<op><=|>=|<|>)\s*(?P<threshold>[-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*$"
)
RULE_GRAMMAR = (
    "'[stat] metric op threshold', e.g. 'p99 ttft_ms < 700' or 'error_rate < 0.01'; "
    f"stat: {', '.join(STATS)}; op: <, <=, >, >="
)


class ParsedRule(NamedTuple):
    """A rule as the grammar reads it: names unchecked (``SlaRule`` checks them against the
    registry), the stat in the summary's spelling (``p99_9``)."""

    stat: str | None
    metric: str
    op: str
    threshold: float

    def text(self) -> str:
        """The rule as written: 'p99 ttft_ms < 700'."""
        head = f"{self.stat} {self.metric}" if self.stat else self.metric
        return f"{head} {self.op} {self.threshold:g}"


def stat_key(stat: str) -> str:
    """A stat as the summary names it: 'p99.9' is 'p99_9'."""
    return stat.replace(".", "_")


def parse_rule(text: str) -> ParsedRule:
    """``'[stat] metric op threshold'`` -> its parts; ``ValueError`` citing the grammar."""
    m = _RULE.match(text)
    if not m:
        raise ValueError(f"cannot parse rule {text!r}; grammar: {RULE_GRAMMAR}")
    try:
        threshold = float(m["threshold"])
    except ValueError:
        raise field_msg("threshold", f"expected a number, got {m['threshold']!r}") from None
    stat = m["stat"]
    return ParsedRule(stat_key(stat) if stat else None, m["metric"], m["op"], threshold)


# sla.max_error_rate's default (here once: the report reads it for a saved run that predates it).
MAX_ERROR_RATE = 0.01


class SlaRule(StrictModel):
    """A run-level pass/fail rule on a percentile (or a run scalar), written as one string."""

    # A metric of the registry (see Metrics).
    metric: str
    # Its statistic for a distribution: p50, p90, p95, p99, p99_9, mean, ...
    stat: str | None = None
    # The comparison: <, <=, >, >=.
    op: Op
    # The bound, in the metric's unit.
    threshold: float

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, v: object) -> object:
        return parse_rule(v)._asdict() if isinstance(v, str) else v

    @field_validator("stat", mode="before")
    @classmethod
    def _dotted(cls, v: object) -> object:
        """'p99.9' is 'p99_9' (as the SLA evaluation reads it)."""
        return stat_key(v) if isinstance(v, str) else v

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
        return ParsedRule(self.stat, self.metric, self.op, self.threshold).text()


# The per-request SLOs, one optional bound in ms per registry SLO (sla.ttft_ms, ...), first in
# the profile as they always were; the model is built from the registry so a new SLO is a flag.
_Slos: type[StrictModel] = create_model(  # type: ignore[call-overload]
    "_Slos",
    __base__=StrictModel,
    __doc__="The per-request SLOs: one optional bound in ms for each SLO of the metric registry.",
    **{name: (float | None, Field(None, gt=0)) for name in metric_defs.SLOS},
)


class SlaConfig(_Slos):
    """Per-request SLOs (for goodput: each registry SLO, e.g. ``ttft_ms``, a bound in ms every
    good request meets) and run-level rules (for the pass/fail verdict)."""

    # Run-level rules for the pass/fail verdict, e.g. 'p99 ttft_ms < 700'.
    rules: tuple[SlaRule, ...] = ()
    # Failed / (ok + failed) above which every verdict fails, whatever the latency rules say:
    # percentiles are of the ok requests, so without it a run with most requests failed could
    # pass. 1.0 turns it off.
    max_error_rate: float = Field(MAX_ERROR_RATE, ge=0, le=1)
