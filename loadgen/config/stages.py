"""Load stages: a run that measures several load levels, one after another, in one process.

A profile either gives one load level (``load.concurrency`` or ``load.rate``, as always) or a
list of levels: ``load.stages`` (each its own level, arrival process, length and ramp) or
``load.sweep`` (one knob over a list of values: ``concurrency: [1, 2, 4]``, or ``rate:
"2..20:10"`` for 10 values linearly from 2 to 20, ``"1..256:x2"`` for a geometric series).
``resolve_stages`` turns any of the three into the one list the runner executes.

A ramp (``ramp_s``) raises the load linearly from the previous stage's level (0 for the first)
into the stage; requests sent during it are recorded as warm-up, so they never count in the
stage's statistics, and the stage's window starts after it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator, model_validator

from loadgen.config.base import Arrival, Int, StrictModel, field_msg

MAX_STAGES = 200
_SERIES = re.compile(
    r"^\s*(?P<lo>[0-9.]+)\s*\.\.\s*(?P<hi>[0-9.]+)\s*(?::\s*(?P<x>x)?\s*(?P<n>[0-9.]+))?\s*$"
)
SERIES_GRAMMAR = (
    "a list ([1, 2, 4]) or 'LO..HI:N' (N values, linear) or 'LO..HI:xF' (geometric, factor F), "
    "e.g. '2..20:10' or '1..256:x2'"
)


class StageConfig(StrictModel):
    """One load level: closed loop (``concurrency``) or open loop (``rate``), for a duration or
    a request count (whichever ends first), with an optional ramp into it."""

    # The stage's name in reports (default: its load, e.g. c=8).
    name: str | None = Field(None, max_length=100)
    # Closed loop: this many users, each sending its next request when its last one ended.
    concurrency: Int | None = Field(None, ge=1)
    # Open loop: requests per second, sent on a seeded schedule whatever the server does.
    rate: float | None = Field(None, gt=0, le=1e6)
    # Open-loop arrival process: poisson, constant or gamma.
    arrival: Arrival = "poisson"
    # Gamma arrivals' shape: below 1 burstier than Poisson, above 1 more even.
    burstiness: float = Field(1.0, gt=0, le=1e6)
    # Open loop: at most this many in flight; waiting for a slot is client lag.
    max_concurrency: Int | None = Field(None, ge=1)
    # The stage ends after this many seconds.
    duration_s: float | None = Field(None, gt=0, le=30 * 86_400)
    # The stage ends after this many measured requests.
    num_requests: Int | None = Field(None, ge=1, le=10_000_000)
    # Users (or rate) ramp up linearly over this many seconds; what the ramp sends is warm-up.
    ramp_s: float = Field(0.0, ge=0, le=86_400)
    # Requests sent first and excluded from the figures.
    warmup_requests: Int = Field(0, ge=0, le=10_000_000)

    @model_validator(mode="after")
    def _one_level_and_a_stop(self):
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("a stage sets exactly one of concurrency or rate")
        if self.duration_s is None and self.num_requests is None:
            raise ValueError("a stage needs duration_s or num_requests (or both)")
        return self


class SweepConfig(StrictModel):
    """One knob swept over values, each value a stage of the same length: ``stage_duration_s``
    and/or ``stage_requests``, by default the workload's ``duration_s`` / ``num_requests``; each
    stage begins with ``load.warmup_requests`` warm-up requests and its ramp."""

    # One stage per level: a list, or a range such as '1:64:x2'.
    concurrency: list[int] | str | None = None
    # One stage per rate (req/s): a list, or a range such as '2:20:+2'.
    rate: list[float] | str | None = None
    # Open-loop arrival process: poisson, constant or gamma.
    arrival: Arrival = "poisson"
    # Gamma arrivals' shape: below 1 burstier than Poisson.
    burstiness: float = Field(1.0, gt=0, le=1e6)
    # Each stage's duration in seconds.
    stage_duration_s: float | None = Field(None, gt=0, le=86_400)
    # Each stage's count of measured requests.
    stage_requests: Int | None = Field(None, ge=1, le=10_000_000)
    # Each stage's ramp in seconds.
    ramp_s: float = Field(0.0, ge=0, le=86_400)

    @field_validator("concurrency", "rate", mode="before")
    @classmethod
    def _no_bool(cls, v: object) -> object:
        if isinstance(v, bool) or (isinstance(v, list) and any(isinstance(x, bool) for x in v)):
            raise ValueError(f"expected {SERIES_GRAMMAR}")
        return v

    @model_validator(mode="after")
    def _one_knob_and_a_length(self):
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("a sweep sets exactly one of concurrency or rate")
        values = self.values()  # raises on a bad series
        knob = "concurrency" if self.concurrency is not None else "rate"
        if not values:
            raise field_msg(knob, f"the series is empty; {SERIES_GRAMMAR}")
        if len(values) > MAX_STAGES:
            raise field_msg(knob, f"{len(values)} values; a run holds at most {MAX_STAGES} stages")
        return self

    def values(self) -> list[float]:
        """The swept values, in order (integers for concurrency)."""
        knob = "concurrency" if self.concurrency is not None else "rate"
        raw = self.concurrency if self.concurrency is not None else self.rate
        values = parse_series(raw, knob)
        if knob == "concurrency":
            if any(v < 1 or v != int(v) for v in values):
                raise field_msg(knob, "concurrency values must be whole numbers >= 1")
            return [int(v) for v in values]
        if any(v <= 0 for v in values):
            raise field_msg(knob, "rates must be > 0")
        return values


def parse_series(raw: Any, knob: str) -> list[float]:
    """``[1, 2, 4]`` as given; ``'2..20:10'`` -> 10 values linearly; ``'1..256:x2'`` -> 1, 2, ...,
    256 (factor 2); ``'2..8'`` -> 2, 8."""
    if isinstance(raw, list):
        return [float(v) for v in raw]
    m = _SERIES.match(str(raw))
    if not m:
        raise field_msg(knob, f"cannot read {str(raw)[:40]!r}; {SERIES_GRAMMAR}")
    lo, hi = float(m["lo"]), float(m["hi"])
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo or lo <= 0:
        raise field_msg(knob, f"{raw!r}: need 0 < LO <= HI")
    if m["n"] is None:
        return [lo, hi] if hi > lo else [lo]
    n = float(m["n"])
    if m["x"]:
        if n <= 1:
            raise field_msg(knob, f"{raw!r}: the factor must be > 1")
        out = [lo]
        while out[-1] * n <= hi * (1 + 1e-9) and len(out) <= MAX_STAGES:
            out.append(out[-1] * n)
        return out
    if n < 1 or n != int(n) or n > MAX_STAGES:
        raise field_msg(knob, f"{raw!r}: N must be a whole number from 1 to {MAX_STAGES}")
    if n == 1:
        return [lo]
    step = (hi - lo) / (n - 1)
    return [round(lo + i * step, 9) for i in range(int(n))]


TRACE = "trace"  # a stage's arrival when a trace's own times schedule it
CLOSED_LOOP = "closed loop"  # a stage's arrival when its users send as their answers end


def recorded_load(load: dict[str, Any], trace: bool = False) -> dict[str, Any]:
    """A load section (``LoadConfig``'s fields, as data) as it ran: a closed loop says so, a
    trace replay says ``arrival: trace``, a run of stages or a sweep keeps the top-level level
    out (its stages, each by ``shape_fields``, say what ran). ``LoadConfig.recorded`` writes
    conditions with it; ``analysis.condition_diff`` reads an earlier loadgen's conditions
    through it, so a baseline recorded before this rule compares with a run recorded after."""
    out = dict(load)
    if out.get("stages") or out.get("sweep") is not None:
        for key in ("concurrency", "rate", "arrival", "burstiness", "max_concurrency"):
            out.pop(key, None)
        # A file read back may hold another tool's stages (names, not settings): kept as they are.
        out["stages"] = [shape_fields(s) if isinstance(s, dict) else s for s in out.get("stages") or []]
        if isinstance(out.get("sweep"), dict):
            out["sweep"] = shape_fields(out["sweep"])
        return out
    if trace:
        out["arrival"] = TRACE
        out.pop("burstiness", None)
        return out
    return shape_fields(out)


def shape_fields(level: dict[str, Any]) -> dict[str, Any]:
    """A load level's settings as they ran: a closed loop (``concurrency``) says ``arrival:
    closed loop`` and has no burstiness or in-flight cap; an open loop's burstiness shows only
    for gamma arrivals, the one process it shapes. What the settings' defaults say of a knob
    that did not run is left out (conditions record the load that was executed)."""
    out = dict(level)
    closed = out.get("concurrency") is not None
    if closed and "arrival" in out:
        out["arrival"] = CLOSED_LOOP
    if closed:
        out.pop("max_concurrency", None)
    if out.get("arrival") != "gamma":
        out.pop("burstiness", None)
    return out


@dataclass(frozen=True, slots=True)
class Stage:
    """One load level as the runner executes it."""

    index: int
    name: str
    concurrency: int | None
    rate: float | None
    arrival: str
    burstiness: float
    max_concurrency: int | None
    duration_s: float | None
    num_requests: int | None
    ramp_s: float
    warmup_requests: int
    until: str | None = None  # load.until: the precision that also ends the stage
    drain_s: float | None = None  # in flight at the end: cancelled after this (runner Limits)

    @property
    def level(self) -> float:
        """The offered load: concurrency (closed loop) or requests/s (open loop)."""
        return float(self.concurrency if self.concurrency is not None else self.rate or 0.0)

    def load(self) -> dict[str, Any]:
        """The stage's load as summary.json states it (only what ran: ``shape_fields``)."""
        return shape_fields(
            {
                "concurrency": self.concurrency,
                "rate": self.rate,
                "arrival": self.arrival,
                "burstiness": self.burstiness,
                "max_concurrency": self.max_concurrency,
                "duration_s": self.duration_s,
                "num_requests": self.num_requests,
                "ramp_s": self.ramp_s,
                "warmup_requests": self.warmup_requests,
                "until": self.until,
            }
        )


def _named(index: int, concurrency: int | None, rate: float | None) -> str:
    return f"c={concurrency}" if concurrency is not None else f"rate={rate:g}"


def sweep_warmup(warmup: int, concurrency: int | None, rate: float | None) -> int:
    """A sweep stage's warm-up: ``load.warmup_requests`` at most, and no more than one request
    per slot (closed loop) or one second of arrivals (open loop). A fixed count would fill the
    low stages: 16 warm-up requests at c=1 are a 6 s stage's whole length."""
    if concurrency is not None:
        return min(warmup, concurrency)
    if rate is not None:
        return min(warmup, max(1, math.ceil(rate)))
    return warmup


def resolve_stages(load: Any, workload: Any) -> list[Stage]:
    """The stages a profile runs: its ``load.stages``, its ``load.sweep`` expanded, or its one
    load level (``load.concurrency`` / ``load.rate`` for ``workload``'s duration or count); each
    with ``load.until``, when set."""
    stages = _stages(load, workload)
    until = getattr(load, "until", None)
    return [dataclasses.replace(s, until=until) for s in stages] if until else stages


def _stages(load: Any, workload: Any) -> list[Stage]:
    if load.stages:
        return [
            Stage(
                i,
                s.name or _named(i, s.concurrency, s.rate),
                s.concurrency,
                s.rate,
                s.arrival,
                s.burstiness,
                s.max_concurrency,
                s.duration_s,
                s.num_requests,
                s.ramp_s,
                s.warmup_requests,
            )
            for i, s in enumerate(load.stages)
        ]
    if load.sweep is not None:
        return _sweep_stages(load, workload)
    trace = getattr(workload, "trace", None) is not None
    return [
        Stage(
            0,
            "trace replay" if trace else _named(0, load.concurrency, load.rate),
            load.concurrency,
            load.rate,
            TRACE if trace else load.arrival,
            load.burstiness,
            load.max_concurrency,
            workload.duration_s,
            workload.num_requests,
            0.0,
            load.warmup_requests,
        )
    ]


def _sweep_stages(load: Any, workload: Any) -> list[Stage]:
    """``load.sweep`` expanded: one stage per value, each as long as the sweep (or, when it does
    not say, the workload) says, with its warm-up capped to the stage's level."""
    sw = load.sweep
    closed = sw.concurrency is not None
    duration, count = sw.stage_duration_s, sw.stage_requests
    if duration is None and count is None:  # each stage as long as the workload says
        duration, count = workload.duration_s, workload.num_requests
    out = []
    for i, v in enumerate(sw.values()):
        c, r = (int(v), None) if closed else (None, float(v))
        warmup = sweep_warmup(load.warmup_requests, c, r)
        out.append(
            Stage(
                i, _named(i, c, r), c, r, sw.arrival, sw.burstiness, None, duration, count, sw.ramp_s, warmup
            )
        )
    return out
