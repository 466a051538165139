"""Fit the simulator to a measured server: its efficiencies from the stages of one run.

A run's stages (a sweep's concurrencies, a capacity search's rates, any multi-stage run) measure
per stage the TTFT's middle and tail, the TPOT's middle and the output tokens/s. The simulator
predicts the same four figures by replaying each stage's own requests in virtual time
(``sim_fit_replay``), given a preset (model x GPU x precision) and the efficiencies it leaves
open: achieved bandwidth and FLOP/s fractions and a fixed cost per step. The fit chooses them
by least squares on the log residuals (a 10 % miss weighs the same on a 5 ms TPOT as on a 2 s
TTFT), each divided by its figure's spread over the stage's requests, in log parameters so each
moves in relative steps (``sim_fit_solve``; what both share, the bounds, thresholds and the
fit's input and result, is ``sim_fit_model``). The KV capacity is not fitted: when
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
from pathlib import Path
from typing import Any

from loadgen.analysis.record_store import read_run_table
from loadgen.analysis.sim_fit_model import (
    FITTABLE,
    LATENCY,
    MAX_RESIDUAL_PCT,
    MAX_RESIDUAL_SPREADS,
    MIN_SENSITIVITY,
    PARAMS,
    Fit,
    FitError,
    FitInput,
    FitRejected,
)
from loadgen.analysis.sim_fit_replay import METRICS, FitStage, predict, read_stage, stage_from_table
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


# Fields of the run's own sim: section the twin does not inherit: how it was paced and seeded,
# where it came from, and what the fit sets.
_NOT_INHERITED = ("time_scale", "seed", "preset_file", *FITTABLE)
_VLLM_CACHE_INFO = "vllm:cache_config_info"


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
        table = read_run_table(path)
    except OSError as exc:
        raise FitError(f"cannot read the records of {path} (the fit replays its requests): {exc}") from None
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
