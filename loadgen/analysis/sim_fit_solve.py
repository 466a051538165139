"""The least squares of ``sim_fit``: the parameters' logs and the request latency's against every
stage's log residuals, the sensitivity check, and the intervals.

Each evaluation replays every stage (a few ms to a few tens of ms a stage), and a replay's
figures move in small jumps as requests join one step or the next, so the Jacobian is taken
by finite differences of ``DIFF_STEP`` in the logs, not of 1e-4, and the sensitivities and
intervals come from the one the solver ended on.

Jumps make local minima, so two things keep the solver out of them. Each residual is divided by
its figure's spread (``FitStage.spread``): a TTFT p99 of eight requests jumps the most and
weighs the least, a TPOT median the least and the most. And the solver starts twice, from the
preset's own values and from the bandwidth at which the lightest stage's TPOT median comes out
as measured (decode is memory-bound: that figure is the weights' read time plus a step's fixed
cost), and keeps the better end; both with the request latency found first on its own
(``_latency_start``).
"""

from __future__ import annotations

import math
from typing import Any

from loadgen.analysis.sim_fit_model import (
    BOUNDS,
    DIFF_STEP,
    LATENCY,
    METRICS,
    MIN_SENSITIVITY,
    START,
    WHAT_PINS,
    Fit,
    FitError,
    FitInput,
)
from loadgen.analysis.sim_fit_replay import predict
from loadgen.sim import SimConfig

_MISS = 5.0  # the log residual of a figure the twin cannot produce (e^5: 150 times off)


def solve(source: FitInput, names: tuple[str, ...], drop_weak: bool) -> Fit:
    """The fit of ``names``; with ``drop_weak`` the weakest unidentified one is dropped and
    the rest fitted again from where the last fit ended, until every one left is identified."""
    import numpy as np
    from scipy.optimize import least_squares  # sim_fit.fit checked it is there

    evaluations = 0
    preset = SimConfig.from_dict(source.base)
    # a preset's zero (no cost per sequence) is no start for a search in logs
    own = {**START, **{p: float(getattr(preset, p)) for p in names if getattr(preset, p) > 0}}
    starts = [own, {**own, "bandwidth_efficiency": _bandwidth_start(source, own)}]
    dropped: dict[str, float] = {}
    live = list(names)
    while True:
        # x: the parameters' logs, then the request latency's
        lo = np.log([BOUNDS[p][0] for p in (*live, LATENCY)])
        hi = np.log([BOUNDS[p][1] for p in (*live, LATENCY)])

        def residuals(x: Any, live: list[str] = live) -> Any:
            nonlocal evaluations
            evaluations += 1
            fields = {**source.base, **{p: math.exp(v) for p, v in zip(live, x)}}
            out = []
            for s in source.stages:
                pred = predict(fields, s, math.exp(x[-1]))
                for m in METRICS:
                    r = math.log(pred[m] / s.measured[m]) if pred[m] > 0 else _MISS
                    out.append((r if math.isfinite(r) else _MISS) / s.spread.get(m, 1.0))
            return np.array(out)

        ends = []
        for start in starts:
            x0 = np.clip(np.log([start[p] for p in (*live, LATENCY)]), lo + 1e-9, hi - 1e-9)
            x0[-1] = _latency_start(np, residuals, x0, (lo[-1], hi[-1]))
            ends.append(least_squares(residuals, x0, bounds=(lo, hi), diff_step=DIFF_STEP, x_scale=1.0))
        res = min(ends, key=lambda r: float(r.cost))
        jac = np.asarray(res.jac)
        sensitivity = [_sensitivity(np, jac, i) for i in range(len(live))]
        weak = sorted(((p, s) for p, s in zip(live, sensitivity) if s < MIN_SENSITIVITY), key=lambda w: w[1])
        if not weak:
            break
        if not drop_weak:
            raise FitError(_refusal(weak))
        name, s = weak[0]
        dropped[name] = s
        starts = [{**own, **{p: math.exp(v) for p, v in zip((*live, LATENCY), res.x)}}]
        live.remove(name)
        if not live:
            raise FitError(_refusal(sorted(dropped.items(), key=lambda w: w[1])))
    # pinv: the latency's column is zero where it does not matter (every request found the
    # engine busy), which the parameters' intervals do not depend on
    diag = np.diag(np.linalg.pinv(jac.T @ jac))
    dof = max(1, res.fun.size - len(res.x))
    sigma2 = float(res.fun @ res.fun) / dof
    params = {p: math.exp(v) for p, v in zip(live, res.x)}
    intervals = {
        p: (math.exp(v - 1.96 * math.sqrt(d * sigma2)), math.exp(v + 1.96 * math.sqrt(d * sigma2)))
        for p, v, d in zip(live, res.x, diag)
    }
    latency = math.exp(res.x[-1])
    out = Fit(source, params, intervals, latency, dropped=dropped)
    fields = {**source.base, **params}
    out.predicted = [predict(fields, s, latency) for s in source.stages]
    out.evaluations = evaluations + 1
    return out


def _latency_start(np: Any, residuals: Any, x0: Any, bounds: tuple[float, float]) -> float:
    """The request latency's log that fits best with the parameters at ``x0``'s, by a bounded
    one-dimensional search within ``bounds`` (to 10 %). Least squares cannot find it from
    there: a TPOT median or a throughput of thousands of samples jumps by many of its spreads
    as a request joins one step or the next, its trust region shrinks to those jumps, and it
    stops with the latency where it began."""
    from scipy.optimize import minimize_scalar

    def cost(v: float) -> float:
        return float(np.sum(residuals(np.append(x0[:-1], v)) ** 2))

    found = minimize_scalar(cost, bounds=bounds, method="bounded", options={"xatol": 0.1})
    return float(found.x) if cost(float(found.x)) < cost(float(x0[-1])) else float(x0[-1])


def _bandwidth_start(source: FitInput, at: dict[str, float]) -> float:
    """The bandwidth efficiency at which the lightest stage's TPOT median is the measured one,
    the rest at ``at`` (bisection in its log: the prediction falls as the bandwidth rises)."""
    stage = min(source.stages, key=lambda s: s.measured["output_tokens_per_s"])
    lo, hi = (math.log(b) for b in BOUNDS["bandwidth_efficiency"])
    for _ in range(12):
        mid = (lo + hi) / 2
        fields = {**source.base, **{k: v for k, v in at.items() if k != LATENCY}}
        fields["bandwidth_efficiency"] = math.exp(mid)
        tpot = predict(fields, stage, at[LATENCY])["tpot_p50_ms"]
        if tpot > stage.measured["tpot_p50_ms"]:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def _sensitivity(np: Any, jac: Any, i: int) -> float:
    """How far the residuals move per unit of parameter ``i``'s log when every other column
    re-adjusts: the part of its Jacobian column the others cannot reproduce (its norm is
    ``1 / sqrt((J^T J)^-1_ii)`` when J has full rank, and 0 for a column of zeros)."""
    col, others = jac[:, i], np.delete(jac, i, axis=1)
    coef, *_ = np.linalg.lstsq(others, col, rcond=None)
    return float(np.linalg.norm(col - others @ coef))


def _refusal(weak: list[tuple[str, float]]) -> str:
    """Every unidentified parameter named, weakest first (which is weakest is the optimizer's
    accident), with what would pin it."""
    return (
        f"these stages do not identify {', '.join(p for p, _ in weak)}: moving one by 10 % (the "
        f"others re-fitted) must move the predictions by at least {MIN_SENSITIVITY / 10:.1f} of "
        "their spread; "
        + "; ".join(f"{p} moves them {s / 10:.2g}, add {WHAT_PINS[p]}" for p, s in weak)
        + " (or leave it out of --params: it keeps the preset's default)"
    )
