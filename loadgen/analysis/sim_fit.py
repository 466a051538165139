"""Fit the simulator to a measured server: its efficiencies from the stages of one run.

A run's stages (a sweep's concurrencies, a capacity search's rates, any multi-stage run) measure
per stage the TTFT's middle and tail, the TPOT's middle and the output tokens/s. The simulator
predicts the same four figures by replaying each stage's own requests in virtual time
(``sim_fit_replay``), given a preset (model x GPU x precision) and the efficiencies it leaves
open: achieved bandwidth and FLOP/s fractions and a fixed cost per step. The fit chooses them
by least squares on the log residuals (a 10 % miss weighs the same on a 5 ms TPOT as on a 2 s
TTFT), each divided by its figure's spread over the stage's requests, in log parameters so each
moves in relative steps (``sim_fit_solve``). The KV capacity is not fitted: when
the server's ``/metrics`` named its blocks (vLLM's ``cache_config_info``) they are copied.

A fit is refused, not returned, when the stages cannot support it: each parameter's sensitivity
at the solution must clear ``MIN_SENSITIVITY`` (``drop_weak`` instead keeps the preset's value
of one that does not, and says so), and the twin must reproduce every stage's figures within
``MAX_RESIDUAL_PCT``, or within ``MAX_RESIDUAL_SPREADS`` of a figure's own spread where that is
wider (else ``FitRejected``, which carries the fit to show its residuals).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.analysis.sim_fit_replay import METRICS, FitStage, predict, read_stage, stage_from_table
from loadgen.analysis.table import RecordTable
from loadgen.errors import LoadgenError
from loadgen.sim import SimConfig, SimConfigError

__all__ = [
    "FITTABLE",
    "LATENCY",
    "MAX_RESIDUAL_PCT",
    "MAX_RESIDUAL_SPREADS",
    "METRICS",
    "MIN_SENSITIVITY",
    "PARAMS",
    "Fit",
    "FitError",
    "FitInput",
    "FitRejected",
    "FitStage",
    "fit",
    "predict",
    "read_run",
    "read_stage",
    "stage_from_table",
]

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
# Fields of the run's own sim: section the twin does not inherit: how it was paced and seeded,
# where it came from, and what the fit sets.
_NOT_INHERITED = ("time_scale", "seed", "preset_file", *FITTABLE)
_VLLM_CACHE_INFO = "vllm:cache_config_info"


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


def read_run(
    run_dir: str | Path, preset: str | None = None, settings: dict[str, Any] | None = None
) -> FitInput:
    """The run's stages (from its requests.jsonl, each stage's records those with its index)
    and base config; ``preset`` overrides the run's own, and ``settings`` sets what no run
    records of a real server: its scheduler (``max_num_seqs``, ``max_num_batched_tokens``,
    ``kv_allocation``, ...), which the twin must share to be one."""
    path = Path(run_dir)
    try:
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        raise FitError(f"cannot read {path / 'summary.json'}: {exc}") from None
    conditions = summary.get("conditions") or {}
    builtin = (conditions.get("target") or {}).get("builtin_simulator") or {}
    own_sim = dict(builtin.get("config") or {})
    scale = float(own_sim.get("time_scale", 1.0))
    if scale <= 0:
        raise FitError("the simulator served this run unpaced (time_scale 0): its times say nothing")
    defaults = SimConfig.model_fields
    base = {
        k: v
        for k, v in own_sim.items()
        if k not in _NOT_INHERITED and (k == "preset" or k not in defaults or v != _default(k))
    }
    if preset is not None:
        base["preset"] = preset
    unfit = sorted(set(settings or {}) & set(FITTABLE))
    if unfit:
        raise FitError(f"--set {unfit[0]}: the fit sets it; leave it out of --params to keep its default")
    base.update(settings or {})
    if "preset" not in base:
        raise FitError(
            "a real server's run: name the simulator preset it resembles with --preset "
            "<model>-<precision>@<gpu> (`loadgen sim --help` and docs/simulator.md list them)"
        )
    kv_source = _read_kv(conditions, base)
    try:
        SimConfig.from_dict(base)
    except SimConfigError as exc:
        raise FitError(f"{exc} (`loadgen sim --help` and docs/simulator.md list the presets)") from None
    try:
        table = RecordTable.from_file(path / "requests.jsonl")
    except OSError as exc:
        raise FitError(
            f"cannot read {path / 'requests.jsonl'} (the fit replays its requests): {exc}"
        ) from None
    stage_col = table.column("stage")
    stages, skipped = [], []
    for i, st in enumerate(summary.get("stages") or [_whole_run(summary)]):
        load = st.get("load") or {}
        name = st.get("name") or f"stage {i}"
        c = load.get("concurrency") if load.get("rate") is None else None
        stage, why = read_stage(
            name, table.select(stage_col == i), c, scale, float(load.get("ramp_s") or 0.0)
        )
        if stage is None:
            skipped.append(f"{name}: {why}")
        else:
            stages.append(stage)
    return FitInput(str(path), summary.get("run_id"), base, stages, skipped, kv_source)


def _default(name: str) -> Any:
    """A SimConfig field's default as the run's JSON conditions spell it (tuples as lists)."""
    value = SimConfig.model_fields[name].default
    return list(value) if isinstance(value, tuple) else value


def _whole_run(summary: dict[str, Any]) -> dict[str, Any]:
    """A single-stage run as a stage of its own."""
    return {"name": "run", "load": summary["conditions"].get("load", {})}


def _read_kv(conditions: dict[str, Any], base: dict[str, Any]) -> str | None:
    """Copy vLLM's reported KV blocks into ``base``; where they came from, or None."""
    labels = (conditions.get("server") or {}).get("metrics_labels") or {}
    info = (labels.get("info") or {}).get(_VLLM_CACHE_INFO) or {}
    try:
        blocks, size = int(info["num_gpu_blocks"]), int(info["block_size"])
    except (KeyError, TypeError, ValueError):
        return None
    base.update(num_gpu_blocks=blocks, block_size=size)
    return f"read, not fitted: {blocks} blocks of {size} tokens from the server's {_VLLM_CACHE_INFO}"


def fit(source: FitInput, names: tuple[str, ...] = PARAMS, *, drop_weak: bool = False) -> Fit:
    """Least squares on the log residuals of every stage's ``METRICS``, moving ``names`` (the
    others at the preset's defaults) and the request latency. FitError when the stages do not
    identify one of ``names`` (with ``drop_weak``: it keeps the preset's default, is named in
    ``Fit.dropped``, and the rest are fitted again; FitError only when none is identified);
    FitRejected when the twin misses a figure by more than ``MAX_RESIDUAL_PCT`` and more than
    ``MAX_RESIDUAL_SPREADS`` of its spread."""
    try:  # scipy: the fit extra's, imported when fitting
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise FitError("loadgen sim fit needs scipy: pip install 'loadgen[fit]'") from None
    from loadgen.analysis.sim_fit_solve import solve

    unknown = sorted(set(names) - set(FITTABLE))
    if unknown or not names:
        raise FitError(f"--params: cannot fit {unknown or 'nothing'}; valid: {', '.join(FITTABLE)}")
    if not source.stages:
        raise FitError(
            "no stage to fit: " + ("; ".join(source.skipped) if source.skipped else "the run has none")
        )
    t0 = time.perf_counter()
    try:
        out = solve(source, tuple(names), drop_weak)
    except ValueError as exc:  # a stage the preset cannot hold (its KV blocks)
        raise FitError(str(exc)) from None
    out.seconds = time.perf_counter() - t0
    misses = out.misses()
    if misses:
        stage, metric, r, spreads = max(misses, key=lambda m: abs(m[2]) if math.isfinite(m[2]) else math.inf)
        more = f" and {len(misses) - 1} more" if len(misses) > 1 else ""
        raise FitRejected(
            f"rejected: the fitted twin misses {stage}'s {metric} by {r:+.1f} % ({spreads:.1f} of "
            f"its spreads){more}; the bound is {MAX_RESIDUAL_PCT:g} % or {MAX_RESIDUAL_SPREADS:g} "
            "spreads, whichever is wider: the simulator cannot reproduce this server as set up; "
            "check the preset and the settings it shares with the server (--set), or leave out "
            "the stages it misses",
            out,
        )
    return out
