"""What ``sim_fit`` and its solver share: the parameters a fit may move, their bounds and
starts, the thresholds a fit is refused or rejected by, and the fit's input and result (a leaf
below both, so that the solver, which ``sim_fit.fit`` imports when fitting, imports nothing of
``sim_fit``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loadgen.analysis.sim_fit_replay import METRICS, FitStage
from loadgen.errors import LoadgenError

# What a fit moves by default, and what it may move when asked (``fit(names=...)``, the CLI's
# --params): the per-sequence cost pins only on stages whose TPOT grows with the batch faster
# than its KV reads explain (a CPU build of vLLM); a parameter the stages cannot pin (the
# bandwidth of a model that fits in a CPU's cache) is left at the preset's default instead.
PARAMS = ("bandwidth_efficiency", "flops_efficiency", "step_overhead_ms")
FITTABLE = (*PARAMS, "seq_overhead_ms")
# What the simulator does not model but every request pays: the time from the client's send to
# the engine's queue and from its first token back (HTTP, parsing, tokenisation). A request
# that finds the engine idle waits it out in its TTFT; one sent while a step runs hides it
# inside that step (a closed loop's: ``FitStage.resend_ns``). Fitted beside the parameters, as
# each replayed request's delay to the engine, and reported (the twin does not reproduce it).
LATENCY = "request_latency_ms"
# Bounds of each parameter (the fit moves in their logs): efficiencies are fractions of peak,
# the overheads positive times (below a microsecond they no longer matter).
BOUNDS = {
    "bandwidth_efficiency": (1e-3, 1.0),
    "flops_efficiency": (1e-3, 1.0),
    "step_overhead_ms": (1e-3, 1e3),
    "seq_overhead_ms": (1e-4, 1e3),
    LATENCY: (1e-3, 1e3),
}
# Where the solver starts when the preset does not say (``sim_fit_solve``: it starts from the
# preset's own values, and from a bandwidth the lightest stage's TPOT pins).
START = {
    "bandwidth_efficiency": 0.5,
    "flops_efficiency": 0.5,
    "step_overhead_ms": 1.0,
    "seq_overhead_ms": 0.1,
    LATENCY: 0.5,
}
# A parameter moved by 10 % (0.1 in its log) with the others re-fitted must move the residuals,
# each in units of its figure's spread (``FitStage.spread``), by at least 0.4 in norm, else the
# stages do not identify it: its one-sigma error would be beyond 25 %.
MIN_SENSITIVITY = 4.0
# The twin must reproduce every stage's four figures within this, or the fit is rejected: a
# twin that misses a stage it was fitted on by more cannot be trusted at a load it was not.
# Unless the miss is within MAX_RESIDUAL_SPREADS of the figure's own spread: a TTFT p99 of a
# 6-second stage rests on three requests, and a miss its sampling noise explains says nothing
# of the twin.
MAX_RESIDUAL_PCT = 10.0
MAX_RESIDUAL_SPREADS = 3.0
# The finite-difference step of the Jacobian, in the parameters' logs: a replay's figures move
# in small jumps (a request joining one step or the next), which a step of 1e-4 would read as
# slopes of zero or of thousands.
DIFF_STEP = 0.02
# What pins each parameter, for the refusal's advice.
WHAT_PINS = {
    "bandwidth_efficiency": "a decode-bound stage at low load (c=1..4) with long answers",
    "flops_efficiency": "a compute-bound stage: long prompts (TTFT is prefill), a closed loop's "
    "first wave or a load past the knee batch",
    "step_overhead_ms": "stages at two or more loads far apart (e.g. c=1 and c=32), so the fixed "
    "cost of a step separates from the bandwidth term",
    "seq_overhead_ms": "stages at two prompt lengths, so a cost per sequence separates from the KV "
    "reads, which grow with the context",
}


class FitError(LoadgenError):
    """The run cannot be fitted (unreadable, no usable stage, unknown preset) or its stages do
    not identify a parameter; the message says which and what to add."""


class FitRejected(FitError):
    """The fit ran but its twin misses a stage's figure beyond ``Fit.misses``' bounds;
    ``fit`` holds it, for its residual table."""

    def __init__(self, message: str, fit: Fit) -> None:
        super().__init__(message)
        self.fit = fit


@dataclass(frozen=True)
class FitInput:
    """What the fit reads of a run: the base config, the usable stages and those left out."""

    run_dir: str | None
    run_id: str | None
    base: dict[str, Any]  # SimConfig fields: the preset and what the twin shares with the server
    stages: list[FitStage]
    skipped: list[str]  # "name: why", one a stage left out
    kv_source: str | None = None  # where num_gpu_blocks came from, None when the server did not say


@dataclass
class Fit:
    """The fitted parameters, their 95 % intervals, and per stage the predicted figures."""

    source: FitInput
    params: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    request_latency_ms: float  # the nuisance LATENCY, fitted beside the parameters
    predicted: list[dict[str, float]] = field(default_factory=list)
    dropped: dict[str, float] = field(default_factory=dict)  # drop_weak: name -> its sensitivity
    evaluations: int = 0  # replays of every stage the fit ran
    seconds: float = 0.0

    def config_fields(self) -> dict[str, Any]:
        """The SimConfig fields of the twin: the base's and the fitted efficiencies."""
        out = dict(self.source.base)
        out.update({k: round(v, 6) for k, v in self.params.items()})
        return out

    def residuals_pct(self) -> list[dict[str, float]]:
        """Per stage, each figure's (predicted / measured - 1) x 100."""
        return [
            {m: (p[m] / s.measured[m] - 1.0) * 100.0 for m in METRICS}
            for s, p in zip(self.source.stages, self.predicted)
        ]

    def misses(self) -> list[tuple[str, str, float, float]]:
        """(stage, figure, residual %, in spreads) of every figure missed beyond both bounds
        (``MAX_RESIDUAL_PCT`` and ``MAX_RESIDUAL_SPREADS``; a figure not produced at all is one)."""
        out = []
        for s, row in zip(self.source.stages, self.residuals_pct()):
            for m, r in row.items():
                spreads = abs(math.log1p(r / 100.0)) / s.spread[m] if r > -100.0 else math.inf
                if not math.isfinite(r) or (abs(r) > MAX_RESIDUAL_PCT and spreads > MAX_RESIDUAL_SPREADS):
                    out.append((s.name, m, r, spreads))
        return out

    def max_residual_pct(self) -> float:
        """The largest miss over every stage and figure (NaN counts as infinite)."""
        worst = 0.0
        for row in self.residuals_pct():
            for r in row.values():
                worst = max(worst, abs(r) if math.isfinite(r) else math.inf)
        return worst

    def document(self) -> dict[str, Any]:
        """The preset file: the twin's SimConfig fields and the ``fit:`` block saying where they
        came from, how well they fit each stage, and what was read rather than fitted."""
        src = self.source
        stages = [
            {
                "stage": s.name,
                "load": s.load,
                "requests": s.requests,
                "input_tokens": s.isl,
                "output_tokens": s.osl,
                "measured": {m: round(s.measured[m], 4) for m in METRICS},
                "predicted": {m: round(p[m], 4) for m in METRICS},
                "residual_pct": {m: round(r[m], 2) for m in METRICS},
            }
            for s, p, r in zip(src.stages, self.predicted, self.residuals_pct())
        ]
        info = {
            "run": src.run_dir,
            "run_id": src.run_id,
            "intervals_95": {p: [round(lo, 6), round(hi, 6)] for p, (lo, hi) in self.intervals.items()},
            LATENCY: round(self.request_latency_ms, 3),
            "not_identified": {p: round(s, 4) for p, s in self.dropped.items()},
            "max_residual_pct": MAX_RESIDUAL_PCT,
            "max_residual_spreads": MAX_RESIDUAL_SPREADS,
            "kv_capacity": src.kv_source or "not reported by the server: the preset's memory decides it",
            "skipped": src.skipped,
            "stages": stages,
        }
        return {**self.config_fields(), "fit": info}
