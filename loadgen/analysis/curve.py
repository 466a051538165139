"""Many load levels read as one curve: per-stage steady state, the latency-throughput curve, its
knee, and the last level that met the SLA. Pure: records and stage summaries in, JSON out.

Steady state (the rule): a stage's dispatch window (its first to its last measured send) is
cut in thirds; the stage is steady when it has an ok measured request (refusals at a steady
pace are not a steady server), its completion rate and its mean in-flight count in the last
third are each within ``STEADY_TOLERANCE`` of the first third's (a queue still filling, or a
server still warming, shows as a trend), and it has at least ``STEADY_MIN_REQUESTS`` measured
requests. A stage that is not steady is "too short (or too unstable) to mean anything",
and the report says so.

The knee (the rule): between consecutive stages, the throughput's scaling with the offered load
is ``d log(throughput) / d log(offered load)`` (concurrency or rate): 1 when doubling the load
doubles the throughput, 0 when it buys nothing. The knee is the last stage before the first step
whose scaling falls below ``KNEE_SCALING`` (one half: the load grew, the throughput by less than
half as much, in ratio terms), the point past which more load mostly buys latency; why not
latency's own growth: docs/metrics.md, "The curve's knee".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from loadgen import metric_defs
from loadgen.analysis.counts import mean_concurrency
from loadgen.analysis.metrics import Records, as_table
from loadgen.summary import Curve, StageSummary
from loadgen.summary.stages import CurvePoint, CurveRules, Knee, SteadyState

STEADY_TOLERANCE = 0.2
STEADY_MIN_REQUESTS = 12
KNEE_SCALING = 0.5
# The curve's latency columns (the registry's ``curve`` distributions) and the stats kept of each.
CURVE_METRICS: tuple[str, ...] = tuple(d.name for d in metric_defs.CURVE)
CURVE_STATS = ("p50", "p90", "p99")


def steady_state(records: Records) -> SteadyState:
    """Whether a stage's measured requests ran in a steady state (see the module's rule)."""
    t = as_table(records)
    send_all = t.column("t_send_ns")
    end_all, finished = t.ints("t_end_ns")
    measured = send_all[~t.column("warmup") & finished]
    out = SteadyState(steady=False, throughput_change=None, in_flight_change=None, reason=None)
    if not (t.column("ok") & ~t.column("warmup")).any():
        # Refusals at a steady pace are not a steady state of the server: nothing was served.
        out["reason"] = "no measured request was ok"
        return out
    if len(measured) < STEADY_MIN_REQUESTS:
        out["reason"] = f"{len(measured)} measured requests (fewer than {STEADY_MIN_REQUESTS})"
        return out
    # The window is the measured requests' dispatch window (first to last send: the drain after
    # the last send is not load); what the server was doing in it is every request of the
    # stage, warm-up included, since those were in flight too.
    start, stop = int(measured.min()), int(measured.max())
    send, end = send_all[finished], end_all[finished]
    third = (stop - start) // 3
    if third <= 0:
        out["reason"] = "the window has no length"
        return out
    first, last = (start, start + third), (stop - third, stop)

    def done(w: tuple[int, int]) -> int:
        return int(((end >= w[0]) & (end < w[1])).sum())

    def change(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or a == 0 else (b - a) / a

    tput = change(done(first), done(last))
    conc = change(mean_concurrency(send, end, *first), mean_concurrency(send, end, *last))
    out["throughput_change"], out["in_flight_change"] = tput, conc
    unstable = [
        name
        for name, c in (("completion rate", tput), ("requests in flight", conc))
        if c is None or abs(c) > STEADY_TOLERANCE
    ]
    out["steady"] = not unstable
    if unstable:
        out["reason"] = (
            f"{' and '.join(unstable)} changed by more than {STEADY_TOLERANCE:.0%} "
            f"from the first to the last third of the window"
        )
    return out


def curve(stages: Sequence[StageSummary]) -> Curve:
    """The latency-throughput curve of per-stage summaries (each with ``index``, ``name``,
    ``load``, ``counts``, ``metrics``, ``sla``, ``steady_state``), its knee and the last stage
    that met the SLA."""
    knob: Literal["concurrency", "rate"] = (
        "concurrency" if all(s["load"].get("concurrency") is not None for s in stages) else "rate"
    )
    points: list[CurvePoint] = []
    for s in stages:
        m, load = cast(dict[str, Any], s["metrics"]), s["load"]
        goodput = m.get("goodput") or {}
        point: dict[str, Any] = {  # the fixed fields; the registry's curve metrics next
            "stage": s["index"],
            "name": s["name"],
            "offered": load.get("concurrency") if load.get("concurrency") is not None else load.get("rate"),
            "offered_kind": "concurrency" if load.get("concurrency") is not None else "rate",
            "throughput_rps": m.get("request_throughput_rps"),
            "output_tokens_per_s": m.get("output_tokens_per_s"),
            "goodput_rps": goodput.get("requests_per_s"),
            "attained_fraction": goodput.get("attained_fraction"),
            "mean_concurrency": m.get("mean_concurrency"),
            "error_rate": s["counts"].get("error_rate"),
            "sla_verdict": s["sla"].get("verdict"),
            "steady": s["steady_state"]["steady"],
            "ok": s["counts"].get("ok", 0),
        }
        for name in CURVE_METRICS:
            dist = m.get(name) or {}
            point[name] = {k: dist.get(k) for k in CURVE_STATS}
        points.append(cast(CurvePoint, point))
    met = [p["stage"] for p in points if p["sla_verdict"] == "pass"]
    return Curve(
        x=knob,
        points=points,
        knee=knee(points),
        stages_with_ok=sum(1 for p in points if p["ok"]),
        last_stage_meeting_sla=met[-1] if met else None,
        rules=CurveRules(
            steady_state=f"completion rate and in-flight within {STEADY_TOLERANCE:.0%} "
            f"from the first to the last third of the window",
            knee=f"the last stage before throughput stops scaling with the offered load "
            f"(d log throughput / d log load < {KNEE_SCALING:g})",
        ),
    )


def knee(points: Sequence[Mapping[str, Any]]) -> Knee | None:
    """The knee of the curve (see the module's rule), or None when the throughput kept scaling
    with the load over the stages measured. Steps between stages of one offered load, or
    without a throughput, are skipped."""
    for a, b in zip(points, points[1:]):
        x0, x1 = a.get("offered"), b.get("offered")
        t0, t1 = a["throughput_rps"], b["throughput_rps"]
        if x0 is None or x1 is None or t0 is None or t1 is None or min(x0, x1, t0) <= 0 or x1 <= x0:
            continue
        scaling = math.log(max(t1, 1e-12) / t0) / math.log(x1 / x0)
        if scaling < KNEE_SCALING:
            return Knee(stage=a["stage"], name=a["name"], offered=x0, throughput_rps=t0, next_scaling=scaling)
    return None
