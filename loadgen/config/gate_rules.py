"""A gate's rules file: what ``loadgen gate --rules`` reads, validated once on the way in.

Each rule bounds one statistic of a candidate run against a baseline (or an absolute value):
a registry metric (``metric_defs.GATED``) the bootstrap resamples, a stage's, the capacity at
the SLA, a stat of the fidelity block, or what the runs answered. The evaluation is
``analysis.gate``; this module only says which rules are well formed, naming the YAML path of
each problem, so nothing downstream re-checks them.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from loadgen import metric_defs
from loadgen.config.base import StrictModel
from loadgen.config.loading import StrictLoader
from loadgen.config.messages import render_validation_error, yaml_error_problem
from loadgen.errors import ConfigError

RELATIVE_BOUNDS = ("max_regression", "min_ratio", "max_ratio")  # against the baseline's value
BOUNDS = (*RELATIVE_BOUNDS, "max", "min")
# The gate's metrics beyond the registry's: the capacity at the SLA (``loadgen capacity``), the
# fidelity block's distributions ("fidelity.first_token_lag_ms", ...) and what the runs
# answered (``analysis.gate_quality``).
CAPACITY = "capacity_rps"
FIDELITY_METRICS: tuple[str, ...] = tuple(
    metric_defs.FIDELITY_PREFIX + n for n in metric_defs.FIDELITY_FIELDS
)
OUTPUT_AGREEMENT = "output_agreement"
ACCURACY = "quality.accuracy"
JSON_VALID = "quality.json_valid"  # structured output's valid share (workload.response_format)
QUALITY_METRICS: tuple[str, ...] = (OUTPUT_AGREEMENT, ACCURACY, JSON_VALID)
_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")


def stage_ref(stage: int | str) -> str:
    """A stage as a rule names it: ``2`` or ``"c=8"``."""
    return str(stage) if isinstance(stage, int) else repr(stage)


class GateRule(StrictModel):
    """One bound on one statistic. Exactly one of the bounds is set:
    ``max_regression`` (relative, "10%" or 0.10: worse by at most that much; worse means higher
    for latencies and error rate, lower for throughputs and goodput), ``min_ratio`` /
    ``max_ratio`` (candidate / baseline), ``max`` / ``min`` (absolute, on the candidate).
    ``stage`` (an index or a name) limits the rule to that stage of a multi-stage run;
    ``metric: capacity_rps`` bounds ``summary.capacity`` (see ``analysis.gate_stages``);
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
    def _percent(cls, v: object) -> object:
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
    def _stage(cls, v: object) -> object:
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
        if self.metric == CAPACITY:
            if self.stat is not None:
                raise ValueError(f"@stat: {CAPACITY} is a run-level number and takes no stat; drop stat")
            if self.stage is not None:
                raise ValueError(
                    f"@stage: {CAPACITY} is the whole run's capacity (summary.capacity); drop stage"
                )
        elif self.metric.startswith(metric_defs.FIDELITY_PREFIX):
            self._valid_fidelity()
        elif self.metric in QUALITY_METRICS:
            self._valid_quality()
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
        valid = ", ".join(
            [*(g.name for g in metric_defs.GATED), CAPACITY, *FIDELITY_METRICS, *QUALITY_METRICS]
        )
        if d is None:
            raise ValueError(f"@metric: unknown metric {self.metric!r}; valid: {valid}")
        if not d.gate:
            raise ValueError(
                f"@metric: {self.metric} is not resampled by the bootstrap, so a "
                f"gate rule cannot bound it; valid: {valid}"
            )
        if d.kind == "distribution":
            if self.stat not in metric_defs.GATE_STATS:
                stats = ", ".join(metric_defs.GATE_STATS)
                raise ValueError(f"@stat: {self.metric} needs a stat, one of {stats} (got {self.stat!r})")
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
        self._absolute_only(
            f"{self.stat} {self.metric} takes an absolute bound on the candidate (max or min), not one "
            f"relative to the baseline: its values sit near zero, where a ratio is noise; write e.g. "
            f"{{metric: {self.metric}, stat: {self.stat}, max: 1}}"
        )

    def _absolute_only(self, why: str) -> None:
        """Refuse a bound relative to the baseline (``@max_ratio: why``) on a metric that has none."""
        for bound in RELATIVE_BOUNDS:
            if getattr(self, bound) is not None:
                raise ValueError(f"@{bound}: {why}")

    def _valid_quality(self) -> None:
        """A rule on what the runs answered (``analysis.gate_quality``): ``min`` or ``max`` of a
        fraction of the whole run, no stat, no stage, nothing relative to the baseline."""
        if self.stat is not None:
            raise ValueError(
                f"@stat: {self.metric} is a fraction of the whole run and takes no stat; drop stat"
            )
        if self.stage is not None:
            raise ValueError(f"@stage: {self.metric} is the whole run's; drop stage")
        self._absolute_only(
            f"{self.metric} takes an absolute bound on the candidate (min or max), not one relative "
            f"to the baseline; write e.g. {{metric: {self.metric}, min: 0.95}}"
        )
        for bound in ("min", "max"):
            value = getattr(self, bound)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"@{bound}: {self.metric} is a fraction; expected 0 to 1, got {value:g}")

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
        at = "" if self.stage is None else f" at stage {stage_ref(self.stage)}"
        return f"{head} {self.bound} {shown}{at}"

    def limit(self) -> tuple[str, float]:
        """The bound on the estimate (a ratio for relative rules): ("<=" | ">=", value)."""
        v = float(getattr(self, self.bound))
        if self.bound == "max_regression":
            better = self.metric == CAPACITY or metric_defs.get(self.metric).higher_is_better
            return (">=", 1 - v) if better else ("<=", 1 + v)
        return {"min_ratio": (">=", v), "max_ratio": ("<=", v), "max": ("<=", v), "min": (">=", v)}[
            self.bound
        ]


class BootstrapConfig(StrictModel):
    """The gate's bootstrap: redraws of each run's requests, the interval's confidence, its seed."""

    resamples: int = Field(2000, ge=100)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    seed: int = 0


class GateRules(StrictModel):
    """A gate's rules file: the bounds a candidate must keep against its baseline."""

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
