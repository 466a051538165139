"""Capacity: the highest request rate at which the fraction of requests meeting every per-request
SLO is at least A (DistServe's goodput definition): a rate a confirming run held, proposed by a
search over short open-loop stages (or by the simulator fitted to them: ``capacity_twin.py``).

Propose, then confirm (``capacity_confirm.py``). No search of a few minutes can name a cliff to
a few percent (below), so the search only proposes; a confirming run at the proposed rate,
Poisson for ``confirm_s`` (at least 2 minutes), decides, judged by the lower 95 % bound of its
attainment over blocks of time, and steps down while it does not hold and the budget pays. The
headline is the rate that held; the search's bracket and crossing stay in the ``cliff`` block,
as where attainment crosses A (``capacity_result.py``).

A per-request SLO (``ttft_ms``, ``tpot_ms``, ``e2e_ms``) is a bound every request must meet; a
request is good when it finished ok within all of them (analysis/sla.py ``good_mask``). A stage's
attainment is good / (ok + failed) over its measured requests (as ``goodput.attained_fraction``);
it passes when that is >= A. Each stage is Poisson at its rate from an idle server (the last
stage has drained): a warm-up of ``warmup_s`` that grows to 2x the mean end-to-end latency
measured at passing stages (a batch takes that long to fill: long answers need long warm-ups),
then the measured part: 5 s while doubling, ``stage_s`` once the boundary is bracketed, at least
30 requests (the over-saturation verdict's minimum). With a time budget (``budget_s``) the
stages after the bracket share the seconds left (capacity_stages.py ``measured_s``), and the
search stops, saying so, when the next stage would not fit.

The search (``Search``, capacity_search.py; ``CapacityPlan``, capacity_stages.py, runs it as a
StagePlan; this module runs the plan as one run and writes its result):
  1. bracket: from a low start rate, double while stages pass (halve while they fail); these
     stages are screens: a stage from idle that ends before its queue builds can pass past the
     cliff, so the highest screened pass is measured again at full length before the search
     bisects from it;
  2. bisect: the geometric mean of the highest passing rate (lo) and the lowest failing one
     (hi), until hi / lo - 1 <= the relative precision (5 %);
  3. re-measure lo and hi once more; a rate's attainment pools all its stages, and the search
     goes on if the boundary moved.
It stops, saying why, on a stage or time budget, at ``max_rate``, when the client is the
bottleneck (p99 send lag t_send - t_sched > 10 ms: the rate was not offered, the stage is not
counted) or when the server errors (error rate > 5 %).

Why time buys accuracy (docs/metrics.md, "How close the search lands"): where capacity is a
saturation cliff, a tail SLO breaks in bursts, when a stage's Poisson schedule happens to hold a
clump of arrivals; on the simulator's chat case a 3-minute run 3 % past the cliff met a 99 %
attainment 19 times in 40 from idle, and a stage that held no burst passes with no failure at
all. Only longer stages near the boundary tell such rates apart, so with a budget the stages
after the bracket get what is left of it.

Rates are the levels asked, the rates of the Poisson processes the stages drew: the answer is a
Poisson process's, whose counts stray by 1/sqrt(n) from stage to stage (a 5-second stage at 32/s
offers 29 to 35), and a level's verdict is that process's, the stray included. Each stage's
table row also shows the rate it offered (its measured requests over its window).

The 95 % interval, a bootstrap over the stages' requests: each resample redraws every stage's
good flags in circular blocks of consecutive requests, a block the longer of the stage's mean
number in flight and a fifth of its requests (overlapping requests share the server's
state, and failures near a cliff come in bursts of seconds: drawn one by one they would
understate the noise), pools them per level and applies the search's rule: U = the lowest
failing level, L = the highest passing one below it, the crossing interpolated linearly in
attainment between them. The interval is [2.5th percentile of L, 97.5th of U], not percentiles
of the crossing: interpolation assumes attainment is linear between two measured rates, and a
cliff between them pins every crossing to one end, far narrower than the data support. Its low
end reaches down at least to the next level that passed below the highest (``passing_below``):
a pass with no failure in it cannot be resampled into a fail, and near a cliff such a pass is
often luck. The cliff's bracket starts at the highest passing level; ``crossing_rps`` is the
median interpolated crossing. Same profile and seed: the same arrival schedules and the same resamples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadgen.analysis import sla as sla_mod
from loadgen.analysis.cost import cost_inputs
from loadgen.backends import registry
from loadgen.config import LoadConfig, Profile
from loadgen.errors import LoadgenError
from loadgen.runner import api
from loadgen.runner.capacity_confirm import Confirmation, confirm_seconds
from loadgen.runner.capacity_result import capacity_block
from loadgen.runner.capacity_search import (
    RESAMPLES,
    Observation,
    Search,
    bracket,
    interval,
    passing_below,
    resample_goods,
)
from loadgen.runner.capacity_stages import (
    CLIENT_LAG_LIMIT_MS,
    ERROR_RATE_LIMIT,
    CapacityPlan,
    StageMeasure,
    measure,
)
from loadgen.runner.capacity_twin import twin_for
from loadgen.summary import Capacity, Summary

# The search is capacity_search.py, its stages capacity_stages.py: importable from here too.
__all__ = [
    "CAPACITY",
    "CLIENT_LAG_LIMIT_MS",
    "ERROR_RATE_LIMIT",
    "RESAMPLES",
    "CapacityError",
    "CapacityPlan",
    "CapacityRun",
    "Observation",
    "Search",
    "StageMeasure",
    "bracket",
    "capacity_block",
    "capacity_profile",
    "interval",
    "measure",
    "passing_below",
    "resample_goods",
    "run_capacity",
]

CAPACITY = "capacity.json"
METHOD = (
    "propose: double from {start:g} req/s until a stage fails (screens of 5 s), bisect to "
    "{precision:.1%}, re-measure both ends; stages Poisson, {warmup:g} s warm-up (or 2x mean E2E) + "
    "{stage:g} s (30 requests at least), from idle; {proposer}; confirm: a Poisson run of "
    "{confirm:g} s at the proposed rate holds when its queue did not grow and the lower 95% bound of "
    "its attainment (circular-block bootstrap over 10 s blocks; 1 - 3/n with no failure) is >= "
    "{target:g}, else the next run is 5% lower; capacity = the rate that held. The cliff: the highest "
    "passing level with pooled attainment >= {target:g}, 95% CI = [p2.5 highest passing, p97.5 "
    f"lowest failing rate] over {RESAMPLES} circular-block bootstrap resamples of good flags"
)


class CapacityError(LoadgenError, ValueError):
    """A capacity search that cannot start: no SLO, a bad attainment, duration or rate."""


@dataclass(slots=True)
class CapacityRun:
    run_dir: Path
    summary: Summary  # summary.json, its "capacity" included
    capacity: Capacity  # capacity.json


def capacity_profile(profile: Profile, start_rate: float, slos: dict[str, float] | None) -> Profile:
    """``profile`` as the search runs it: open loop at ``start_rate`` with no in-flight cap (so
    the connection pool never queues), its SLOs replaced by ``slos`` when given."""
    update: dict[str, Any] = {"load": LoadConfig(rate=start_rate)}
    if slos is not None:
        update["sla"] = profile.sla.model_copy(update={k: slos.get(k) for k in sla_mod.SLO_FIELDS})
    w = profile.workload
    if w.num_requests is None and w.duration_s is None:  # a sweep's profile: its stages had lengths
        update["workload"] = w.model_copy(update={"duration_s": 60.0})
    return profile.model_copy(update=update)


async def run_capacity(
    profile: Profile,
    *,
    attainment: float,
    slos: dict[str, float] | None = None,
    start_rate: float | None = None,
    stage_s: float = 15.0,
    warmup_s: float = 5.0,
    precision: float = 0.05,
    max_stages: int = 14,
    max_rate: float | None = None,
    budget_s: float | None = None,
    confirm_s: float | None = None,
    twin: str | None = None,
    gpu_hour_cost: float | None = None,
    gpu_count: float | None = None,
    api_key: str | None = None,
    stop: Any = None,
    on_status: Callable[[str], None] | None = None,
    on_stage: Callable[[StageMeasure, bool], None] | None = None,
    on_confirm: Callable[[Confirmation], None] | None = None,
) -> CapacityRun:
    """Search the capacity of ``profile``'s target (or its simulator) as one run: every stage's
    records in requests.jsonl, stages and curve in summary.json, the result in capacity.json and
    ``summary["capacity"]``. ``slos`` (default: the profile's sla.ttft_ms/tpot_ms/e2e_ms);
    ``confirm_s``: a confirming run's measured seconds (default ``capacity_confirm``'s);
    ``twin``: the simulator preset a real server resembles, whose fit to the stages proposes the
    rate to confirm ("off": none; default: the built-in simulator's own preset, none for a URL)."""
    start = start_rate or profile.load.rate or 1.0
    prof = capacity_profile(profile, start, slos)
    chosen = sla_mod.set_slos(prof.sla)
    endpoint = prof.target.endpoint
    checks = [
        (
            registry.backend(endpoint).streamed,  # the staged tables and curves are of streams
            f"endpoint {endpoint} answers whole, not streamed: a capacity search of it is not "
            "supported yet; measure one rate at a time (loadgen run --rate R)",
        ),
        (bool(chosen), "no per-request SLO: give --sla 'ttft_ms<700' or set sla.ttft_ms/tpot_ms/e2e_ms"),
        (0 < attainment <= 1, f"--attainment {attainment:g}: a fraction in (0, 1], e.g. 0.99"),
        (stage_s > 0 and warmup_s >= 0, "--stage-duration must be > 0 and --stage-warmup >= 0"),
        (0 < precision < 1, f"precision {precision:g}: a fraction in (0, 1), e.g. 0.05"),
        (max_stages >= 2, f"--max-stages {max_stages}: at least 2"),
        (0 < start <= 1e6, f"start rate {start:g}: in (0, 1e6] req/s"),
        (max_rate is None or max_rate >= start, f"--max-rate {max_rate}: at least the start rate {start:g}"),
        (budget_s is None or budget_s >= 60, f"--budget {budget_s or 0:g}s: at least 60s, e.g. 4m"),
        (confirm_s is None or confirm_s >= 5, f"--confirm-duration {confirm_s or 0:g}s: at least 5s (2m)"),
    ]
    for ok, msg in checks:
        if not ok:
            raise CapacityError(msg)
    costs = cost_inputs(dict(prof.labels), gpu_hour_cost=gpu_hour_cost, gpu_count=gpu_count)
    search = Search(start, attainment, precision=precision, max_stages=max_stages, max_rate=max_rate)
    try:
        proposer = twin_for(prof, chosen, attainment, twin)
    except ValueError as exc:  # an unknown --twin preset
        raise CapacityError(str(exc)) from None
    said = (
        "the fitted twin proposes the rate to confirm"
        if proposer
        else "the highest passing level is proposed"
    )
    method = METHOD.format(
        start=start,
        precision=precision,
        warmup=warmup_s,
        stage=stage_s,
        target=attainment,
        confirm=confirm_seconds(budget_s, confirm_s),
        proposer=said,
    )
    if budget_s:
        method += f"; near the boundary, stages share a time budget of {budget_s:g} s"
    plan = CapacityPlan(
        search,
        chosen,
        stage_s=stage_s,
        warmup_s=warmup_s,
        budget_s=budget_s,
        confirm_s=confirm_s,
        proposer=proposer,
        on_stage=on_stage,
        on_confirm=on_confirm,
        costs=costs,
        seed=prof.workload.seed,
        method=method,
    )
    res = await api.run_async(prof, api_key=api_key, stop=stop, on_status=on_status, plan=plan)
    cap = res.summary["capacity"]  # the plan's conclusion, put in the summary by summarize
    (res.run_dir / CAPACITY).write_bytes(orjson.dumps(cap, option=orjson.OPT_INDENT_2))
    return CapacityRun(res.run_dir, res.summary, cap)
