"""Fit the simulator to a measured server: its efficiencies from one sweep's summary.

A sweep (or multi-stage or capacity run) of a real server measures, per closed-loop stage, the
mean TTFT, TPOT and output tokens/s at a known concurrency with known mean prompt and answer
lengths. The simulator predicts the same three figures from its engine in virtual time, each
stage sent as a client sends it (``loadgen.sim.virtual_time.serve_stage``), given a preset (model x GPU
x precision) and three efficiencies: achieved bandwidth and FLOP/s fractions and a fixed cost
per step. The fit chooses the efficiencies that minimise the squared log residuals (a 10 % miss
weighs the same on a 5 ms TPOT as on a 2 s TTFT) with ``scipy.optimize.least_squares``, in log
parameters so each moves in relative steps. The KV capacity is not fitted: when the server's
``/metrics`` named its blocks (vLLM's ``cache_config_info``) they are copied, and the fit says so.

A fit that the sweep cannot support is refused, not returned: each parameter's sensitivity at
the solution (how far the residuals move per unit of its log when the others re-adjust) must
clear ``MIN_SENSITIVITY``, or the refusal names the parameter and the stage that would pin it.
Open-loop stages (a rate, not a concurrency) are left out with the reason: the closed-loop
engine run cannot stand for them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.sim import SimConfig, SimConfigError
from loadgen.sim.virtual_time import serve_stage

# What a fit moves by default, and what it may move when asked (``fit(params=...)``, the CLI's
# --params): the per-sequence cost pins only on a sweep whose TPOT grows with the batch faster
# than its KV reads explain (a CPU build of vLLM), and a parameter the sweep cannot pin (the
# bandwidth of a model that fits in a CPU's cache) is left at the preset's default instead.
PARAMS = ("bandwidth_efficiency", "flops_efficiency", "step_overhead_ms")
FITTABLE = (*PARAMS, "seq_overhead_ms")
METRICS = ("ttft_ms", "tpot_ms", "output_tokens_per_s")
# Bounds of each parameter (the fit moves in their logs): efficiencies are fractions of peak,
# the overhead a positive time a step (below a microsecond it no longer matters).
BOUNDS = {
    "bandwidth_efficiency": (1e-3, 1.0),
    "flops_efficiency": (1e-3, 1.0),
    "step_overhead_ms": (1e-3, 1e3),
    "seq_overhead_ms": (1e-4, 1e3),
}
START = {
    "bandwidth_efficiency": 0.5,
    "flops_efficiency": 0.5,
    "step_overhead_ms": 1.0,
    "seq_overhead_ms": 0.1,
}
# A parameter moved by 10 % (0.1 in its log) with the others re-fitted must move the residuals
# by at least 0.4 % (0.004 in the log residuals' norm), else the sweep does not identify it: at
# a run-to-run spread of 2 % a figure, that bounds the parameter's 1-sigma error to about 50 %.
MIN_SENSITIVITY = 0.04
# What the simulator does not model but every measured TTFT holds: the time from the client's
# send to the engine's queue and from its first token back (HTTP, parsing, tokenisation). Left
# out, a fit would charge it to step_overhead_ms (a c=1 TTFT is one prefill step); so it is
# fitted beside the parameters, as one constant added to each predicted TTFT, and reported in
# the preset file's fit: block (the twin does not reproduce it).
LATENCY = "request_latency_ms"
LATENCY_MAX_MS = 1e3
# What pins each parameter, for the refusal's advice.
WHAT_PINS = {
    "bandwidth_efficiency": "a decode-bound stage at low concurrency (c=1..4) with long answers",
    "flops_efficiency": "a compute-bound stage: long prompts (TTFT is prefill) or a concurrency past "
    "the knee batch",
    "step_overhead_ms": "stages at two or more concurrencies far apart (e.g. 1 and 32), so the fixed "
    "cost of a step separates from the bandwidth term",
    "seq_overhead_ms": "stages at two prompt lengths, so a cost per sequence separates from the KV "
    "reads, which grow with the context",
}
# Fields of the run's own sim: section the twin does not inherit: how it was paced and seeded,
# where it came from, and what the fit sets.
_NOT_INHERITED = ("time_scale", "seed", "preset_file", *FITTABLE)
_VLLM_CACHE_INFO = "vllm:cache_config_info"


class FitError(LoadgenError):
    """The run cannot be fitted (unreadable, no usable stage, unknown preset) or the sweep
    does not identify a parameter; the message says which and what to add."""


@dataclass(frozen=True)
class Stage:
    """One closed-loop stage as measured: virtual-time figures when the simulator served it."""

    name: str
    concurrency: int
    requests: int
    input_tokens: int
    output_tokens: int
    measured: dict[str, float]
    warmup: int = 0  # requests sent first and left out of the figures (load.warmup_requests)


@dataclass(frozen=True)
class FitInput:
    """What the fit reads of a run: the base config, the usable stages and those left out."""

    run_dir: str
    run_id: str | None
    base: dict[str, Any]
    stages: list[Stage]
    skipped: list[str]
    kv_source: str | None  # where num_gpu_blocks came from, None when the server did not say


@dataclass
class Fit:
    """The fitted parameters, their 95 % intervals, and per stage the predictions and residuals."""

    source: FitInput
    params: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    request_latency_ms: float  # the nuisance LATENCY, fitted beside the parameters
    predicted: list[dict[str, float]] = field(default_factory=list)

    def config_fields(self) -> dict[str, Any]:
        """The SimConfig fields of the twin: the base's and the fitted efficiencies."""
        out = dict(self.source.base)
        out.update({k: round(v, 6) for k, v in self.params.items()})
        return out

    def document(self) -> dict[str, Any]:
        """The preset file: the twin's SimConfig fields and the ``fit:`` block saying where they
        came from, how well they fit each stage, and what was read rather than fitted."""
        src = self.source
        stages = [
            {
                "stage": s.name,
                "concurrency": s.concurrency,
                "requests": s.requests,
                "input_tokens": s.input_tokens,
                "output_tokens": s.output_tokens,
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
            "kv_capacity": src.kv_source or "not reported by the server: the preset's memory decides it",
            "skipped": src.skipped,
            "stages": stages,
        }
        return {**self.config_fields(), "fit": info}

    def residuals_pct(self) -> list[dict[str, float]]:
        return [
            {m: (p[m] / s.measured[m] - 1.0) * 100.0 for m in METRICS}
            for s, p in zip(self.source.stages, self.predicted)
        ]


def read_run(
    run_dir: str | Path, preset: str | None = None, settings: dict[str, Any] | None = None
) -> FitInput:
    """The run's closed-loop stages and base config; ``preset`` overrides the run's own, and
    ``settings`` sets what no run records of a real server: its scheduler (``max_num_seqs``,
    ``max_num_batched_tokens``, ``kv_allocation``, ...), which the twin must share to be one."""
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
    stages, skipped = [], []
    for i, st in enumerate(summary.get("stages") or [_whole_run(summary)]):
        stage, why = _stage(st, i, scale)
        if stage is None:
            skipped.append(f"{st.get('name', i)}: {why}")
        else:
            stages.append(stage)
    return FitInput(str(path), summary.get("run_id"), base, stages, skipped, kv_source)


def _default(name: str) -> Any:
    """A SimConfig field's default as the run's JSON conditions spell it (tuples as lists)."""
    value = SimConfig.model_fields[name].default
    return list(value) if isinstance(value, tuple) else value


def _whole_run(summary: dict[str, Any]) -> dict[str, Any]:
    """A single-stage run as a stage of its own."""
    return {"name": "run", "load": summary["conditions"].get("load", {}), **summary}


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


def _stage(st: dict[str, Any], index: int, scale: float) -> tuple[Stage | None, str]:
    load, m = st.get("load") or {}, st.get("metrics") or {}
    if load.get("rate") is not None or not load.get("concurrency"):
        return None, "open-loop (a rate, not a concurrency): the fit predicts closed-loop stages only"
    rps = m.get("request_throughput_rps") or 0.0
    ok = (st.get("counts") or {}).get("ok") or 0
    if not rps or ok < 2 or not m.get("ttft_ms") or not m.get("tpot_ms"):
        return None, "fewer than two finished requests with a first token and a TPOT"
    measured = {
        "ttft_ms": m["ttft_ms"]["mean"] / scale,
        "tpot_ms": m["tpot_ms"]["mean"] / scale,
        "output_tokens_per_s": m["output_tokens_per_s"] * scale,
    }
    if min(measured.values()) <= 0:
        return None, "a zero TTFT, TPOT or throughput cannot be fitted in logs"
    name = st.get("name") or f"stage {index}"
    isl = round(m["input_tokens_per_s"] / rps)
    osl = round(m["output_tokens_per_s"] / rps)
    counts = st["counts"]
    stage = Stage(
        name,
        int(load["concurrency"]),
        int(counts["sent"]),
        isl,
        osl,
        measured,
        int(counts.get("warmup") or 0),
    )
    return stage, ""


def predict(fields: dict[str, Any], stage: Stage) -> dict[str, float]:
    """The simulator's mean TTFT, TPOT (ms) and output tokens/s for ``stage`` under ``fields``."""
    config = SimConfig.from_dict({**fields, "time_scale": 0})
    served = serve_stage(
        config, stage.input_tokens, stage.output_tokens, stage.concurrency, stage.requests, stage.warmup
    )
    return {m: getattr(served, m) for m in METRICS}


def _sensitivity(np: Any, jac: Any, i: int) -> float:
    """How far the residuals move per unit of parameter ``i``'s log when every other column
    re-adjusts: the part of its Jacobian column the others cannot reproduce (its norm is
    ``1 / sqrt((J^T J)^-1_ii)`` when J has full rank, and 0 for a column of zeros)."""
    col, others = jac[:, i], np.delete(jac, i, axis=1)
    coef, *_ = np.linalg.lstsq(others, col, rcond=None)
    return float(np.linalg.norm(col - others @ coef))


def with_latency(predicted: dict[str, float], latency_ms: float) -> dict[str, float]:
    """``predicted`` as a client sees it: ``latency_ms`` more TTFT (see LATENCY)."""
    return {**predicted, "ttft_ms": predicted["ttft_ms"] + latency_ms}


def fit(source: FitInput, names: tuple[str, ...] = PARAMS) -> Fit:
    """Least squares on the log residuals, moving ``names`` (the others at the preset's
    defaults); FitError when the sweep cannot identify one of them."""
    unknown = sorted(set(names) - set(FITTABLE))
    if unknown or not names:
        raise FitError(f"--params: cannot fit {unknown or 'nothing'}; valid: {', '.join(FITTABLE)}")
    try:
        import numpy as np
        from scipy.optimize import least_squares
    except ImportError:
        raise FitError("loadgen sim fit needs scipy: pip install 'loadgen[fit]'") from None
    if len(source.stages) < 2:
        usable = len(source.stages)
        raise FitError(
            f"step_overhead_ms cannot be told from bandwidth_efficiency with {usable} closed-loop "
            f"stage(s): add {WHAT_PINS['step_overhead_ms']}"
            + "".join(f"; left out {s}" for s in source.skipped)
        )
    # x: the three parameters' logs, then the request latency in ms (a nuisance, see LATENCY).
    lo = [*np.log([BOUNDS[p][0] for p in names]), 0.0]
    hi = [*np.log([BOUNDS[p][1] for p in names]), LATENCY_MAX_MS]

    def fields_at(x: Any) -> dict[str, Any]:
        return {**source.base, **{p: float(math.exp(v)) for p, v in zip(names, x)}}

    def residuals(x: Any) -> Any:
        fields = fields_at(x)
        return np.array(
            [
                math.log(with_latency(predict(fields, s), x[-1])[m] / s.measured[m])
                for s in source.stages
                for m in METRICS
            ]
        )

    start = [*np.log([START[p] for p in names]), 1.0]
    try:
        res = least_squares(
            residuals, start, bounds=(lo, hi), diff_step=1e-4, x_scale=[*([1.0] * len(names)), 10.0]
        )
    except ValueError as exc:  # a stage the preset cannot hold (its KV blocks)
        raise FitError(str(exc)) from None
    jac = np.asarray(res.jac)
    sensitivity = [_sensitivity(np, jac, i) for i in range(len(names))]
    weak = [(p, s) for p, s in zip(names, sensitivity) if s < MIN_SENSITIVITY]
    if weak:  # every one named, weakest first: which is weakest is the optimizer's accident
        weak.sort(key=lambda w: w[1])
        raise FitError(
            f"this sweep does not identify {', '.join(p for p, _ in weak)}: moving one by 10 % (the "
            f"others re-fitted) must change the predictions by at least {MIN_SENSITIVITY * 10:.1f} % "
            "of the residual norm; "
            + "; ".join(f"{p} changes them {s * 10:.2f} %, add {WHAT_PINS[p]}" for p, s in weak)
            + " (or leave it out of --params: it keeps the preset's default)"
        )
    try:
        # pinv: the request latency's column is zero when it rests on a bound (0: no latency to
        # add), which the parameters' intervals do not depend on
        diag = np.diag(np.linalg.pinv(jac.T @ jac))
    except np.linalg.LinAlgError:  # pragma: no cover - the sensitivities refused it already
        raise FitError("the sweep does not identify the parameters together") from None
    dof = max(1, res.fun.size - len(start))
    sigma2 = float(res.fun @ res.fun) / dof
    fitted = {p: float(math.exp(v)) for p, v in zip(names, res.x)}
    intervals = {
        p: (math.exp(v - 1.96 * math.sqrt(d * sigma2)), math.exp(v + 1.96 * math.sqrt(d * sigma2)))
        for p, v, d in zip(names, res.x, diag)
    }
    out = Fit(source, fitted, intervals, float(res.x[-1]))
    fields = fields_at(res.x)
    out.predicted = [with_latency(predict(fields, s), out.request_latency_ms) for s in source.stages]
    return out
