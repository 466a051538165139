"""The blocks of a run in stages: each stage's summary, the curve over them, the capacity search."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from loadgen.summary.common import DOCS
from loadgen.summary.measures import Counts, Metrics, SlaBlock, Window
from loadgen.summary.server import Speculative
from loadgen.summary.telemetry import Telemetry


@with_config(DOCS)
class Trend(TypedDict, total=True):
    """one signal's trend over a stage's measured window (analysis/saturation.py)"""

    slope_per_s: float
    """least-squares slope of the per-bin values on the bin centres, per second"""
    margin_per_s: float
    """the slope's 95% margin of error (Student's t, bins - 2 degrees of freedom)"""
    growth: float
    """slope x the window's length: how much the signal grew over the stage"""
    mean: float
    """the signal's mean over the bins"""
    material: float
    """the growth that counts as material for this signal"""
    grows: bool
    """slope minus its margin above zero, and growth at least material"""


@with_config(DOCS)
class Saturation(TypedDict, total=True):
    """the stage judged stable or over-saturated from what grows while it runs (the requests
    outstanding, TTFT from the scheduled send, the server's waiting queue), whatever its
    attainment"""

    verdict: Literal["stable", "over_saturated", "undetermined"]
    """undetermined: too few measured requests to tell a trend from noise"""
    reason: str
    """the signals that grew, or why there is no verdict"""
    bins: int
    """equal bins of the measured window the trends were fitted over (0 when undetermined)"""
    signals: dict[str, Trend]
    """outstanding, ttft_ms and (where the server's /metrics has one) waiting"""
    rule: str
    """the rule in words"""


@with_config(DOCS)
class PrecisionBlock(TypedDict, total=True):
    """load.until (--until): the statistic a stage kept going for, the 95% interval it reached
    over its measured ok requests (analysis/precision.py), and whether that precision ended it"""

    until: str
    """the condition as given, e.g. 'p99 ttft_ms ±5%'"""
    target_half_width: float
    """the half-width asked for, a fraction of the estimate"""
    reached: bool
    """true when the precision ended the stage; false when its count or duration did first"""
    estimate: float | None
    """the statistic over the stage's measured ok requests, ms"""
    low: float | None
    """the interval's low end, ms (null: too few requests for an interval)"""
    high: float | None
    """the interval's high end, ms"""
    half_width: float | None
    """the larger side of the interval over the estimate"""
    samples: int
    """the measured ok requests it was computed over"""
    half_width_at_stop: NotRequired[float | None]
    """when the precision ended the stage: the half-width the check saw then (the requests in
    flight at that moment finished after it, and are in the figures above)"""
    samples_at_stop: NotRequired[int | None]
    """the measured ok requests the check had then"""


@with_config(DOCS)
class SteadyState(TypedDict, total=True):
    """whether a stage's measured requests ran in a steady state"""

    steady: bool | None
    """completion rate and in-flight requests within 20% from the first to the last third of the
    stage's dispatch window, with enough measured requests and one of them ok; null: not judged
    (a single-stage run drawn as a one-point curve by `loadgen compare`)"""
    throughput_change: float | None
    """the completion rate's change from the first to the last third"""
    in_flight_change: float | None
    """the mean in-flight count's change from the first to the last third"""
    reason: str | None
    """why it is not steady; null when it is"""


@with_config(DOCS)
class CurveStats(TypedDict, total=True):
    """a latency's percentiles at one stage, ms"""

    p50: float | None
    """the median"""
    p90: float | None
    """the 90th percentile"""
    p99: float | None
    """the 99th percentile"""


@with_config(DOCS)
class CurvePoint(TypedDict, total=True):
    """one stage on the latency-throughput curve"""

    stage: int
    """the stage's index"""
    name: str
    """the stage's name"""
    offered: float | None
    """the offered load: the stage's concurrency or rate"""
    offered_kind: Literal["concurrency", "rate"]
    """which knob `offered` is"""
    throughput_rps: float | None
    """ok requests per second of its measured window"""
    output_tokens_per_s: float | None
    """output tokens per second of its measured window"""
    goodput_rps: float | None
    """requests meeting every per-request SLO per second"""
    attained_fraction: float | None
    """fraction of its requests meeting every per-request SLO"""
    mean_concurrency: float | None
    """mean requests in flight over its window"""
    error_rate: float | None
    """failed / (ok + failed)"""
    sla_verdict: str | None
    """the stage's SLA verdict (pass, fail, none)"""
    steady: bool | None
    """the stage's steady_state.steady"""
    ok: int
    """its ok measured requests"""
    ttft_ms: CurveStats
    """TTFT p50/p90/p99 (the metric registry's curve distributions, as the four below)"""
    tpot_ms: CurveStats
    """TPOT p50/p90/p99"""
    e2e_ms: CurveStats
    """end-to-end latency p50/p90/p99"""
    itl_ms: CurveStats
    """inter-token latency p50/p90/p99"""


@with_config(DOCS)
class Knee(TypedDict, total=True):
    """the last stage before throughput stops scaling with the offered load"""

    stage: int
    """its index"""
    name: str
    """its name"""
    offered: float
    """its offered load"""
    throughput_rps: float
    """its throughput"""
    next_scaling: float
    """d log throughput / d log load from it to the next stage (below 0.5)"""


@with_config(DOCS)
class CurveRules(TypedDict, total=True):
    """the curve's rules in words"""

    steady_state: str
    """the steady-state rule"""
    knee: str
    """the knee rule"""


@with_config(DOCS)
class StageSummary(TypedDict, total=True):
    """one stage: the same counts, window, metrics and sla blocks as the whole run, for its own requests"""

    index: int
    """the stage's number; records carry it as `stage`"""
    name: str
    """the stage's name (c=8, rate=4, or the profile's)"""
    load: dict[str, Any]
    """the stage's load level: concurrency or rate, arrival, cap, length, ramp_s, warm-up"""
    interrupted: NotRequired[bool]
    """the run was stopped during this stage"""
    counts: Counts
    """the stage's request accounting (as the whole run's counts)"""
    window: NotRequired[Window]
    """the stage's measured window"""
    metrics: Metrics
    """the stage's metrics (as the whole run's metrics)"""
    sla: SlaBlock
    """the SLA evaluated on the stage alone"""
    saturation: NotRequired[Saturation]
    precision: NotRequired[PrecisionBlock]
    speculative: NotRequired[Speculative]
    """the stage's speculative decoding, from the scrapes around its window and its records"""
    telemetry: NotRequired[Telemetry]
    """the GPUs over this stage's measured window, when they were read"""
    steady_state: SteadyState
    """steady: completion rate and in-flight requests within 20% from the first to the last third of the
    stage's dispatch window; reason when not"""


@with_config(DOCS)
class Curve(TypedDict, total=False):
    """multi-stage runs only: the latency-throughput curve over the stages"""

    x: Literal["concurrency", "rate"]
    """the offered-load knob the stages varied"""
    points: list[CurvePoint]
    """per stage: offered load, throughput, output tokens/s, goodput, attained fraction, TTFT/TPOT/E2E/ITL
    p50/p90/p99, SLA verdict, steady, ok requests"""
    knee: Knee | None
    """the last stage before throughput stops scaling with the offered load (d log throughput / d
    log load < 0.5): stage, name, offered, throughput_rps, next_scaling; null when it kept scaling"""
    stages_with_ok: int
    """stages with at least one ok measured request (0: no stage was served, and there is no knee to
    find)"""
    last_stage_meeting_sla: int | None
    """the highest-numbered stage whose SLA verdict is pass"""
    rules: CurveRules
    """the steady-state and knee rules in words"""


@with_config(DOCS)
class CapacityStages(TypedDict, total=True):
    """one stage of the search"""

    stage: int
    """the stage's index"""
    kind: NotRequired[Literal["screen", "search", "confirm"]]
    """screen: a short bracketing stage (its pass is measured again); search: a full-length one;
    confirm: a confirming run of the proposed rate"""
    rate: float
    """the level asked: the Poisson rate, req/s"""
    offered_rps: NotRequired[float | None]
    """the rate offered: measured requests over the time from the first one's schedule to the stage's end"""
    attainment: float | None
    """fraction of its measured ok + failed requests that met every SLO"""
    passed: bool
    """attainment >= the target and its queue did not grow (a confirmation: it held, its lower 95%
    bound >= the target)"""
    requests: NotRequired[int]
    """measured requests counted (ok + failed)"""
    throughput_rps: float | None
    """ok measured requests per second of its measured window (the one offered_rps is over)"""
    goodput_rps: NotRequired[float | None]
    """measured requests meeting every SLO per second of the same window"""
    ttft_p99_ms: float | None
    """p99 TTFT, ms"""
    tpot_p99_ms: float | None
    """p99 TPOT, ms"""
    error_rate: NotRequired[float | None]
    """failed / (ok + failed)"""
    counted: NotRequired[bool]
    """false when the client lagged (p99 send lag > 10 ms): the stage did not offer its rate and the search
    ignored it"""
    saturation: NotRequired[Literal["stable", "over_saturated", "undetermined"]]
    """the stage's over-saturation verdict as the search judged it, from the client's own signals
    (the server's scrapes are parsed after the run; summary.stages[].saturation adds its waiting
    queue); an over-saturated stage fails whatever its attainment"""


@with_config(DOCS)
class CapacityTwin(TypedDict, total=False):
    """what the fitted twin said: its fit and its answer, or why it had none"""

    fitted: bool
    """whether the simulator could be fitted to the search's stages"""
    why: str
    """why the twin proposed nothing (the fit's refusal, or the budget's share spent)"""
    preset: str
    """the preset the twin was fitted from"""
    params: dict[str, float]
    """the fitted parameters (bandwidth_efficiency, flops_efficiency, ...)"""
    request_latency_ms: float
    """the fitted client-to-engine latency, ms"""
    max_residual_pct: float
    """the largest residual of the fit on the search's stages, %"""
    stages_fitted: int
    """search stages the twin was fitted to"""
    rate: float | None
    """the rate the twin's own virtual-time search proposes, req/s"""
    lowest_thresholds: list[float]
    """the lowest of the virtual confirmations' holding thresholds, req/s"""
    runs: int
    """virtual confirmations whose threshold was found"""
    out_of_time: bool
    """the twin's share of the budget ended before every virtual confirmation ran"""
    hold: float
    """the probability a confirmation at the proposed rate holds"""
    confirmations_run: int
    """virtual confirmations evaluated"""
    lengths: str
    """what the virtual runs drew their lengths from"""
    seconds: float
    """wall seconds the twin's fit and search took"""


@with_config(DOCS)
class CapacityProposal(TypedDict, total=True):
    """the first rate confirmed and who proposed it"""

    rate: float | None
    """the proposed rate, req/s"""
    by: Literal["twin", "search"]
    """twin: the fitted simulator's own search; search: the highest passing level"""
    twin: CapacityTwin | None
    """what the twin said; null when none was asked"""
    above_confirmed: float | None
    """the proposal over the confirmed rate, minus 1; null when nothing was confirmed"""


@with_config(DOCS)
class CapacityConfirmation(TypedDict, total=True):
    """one confirming run"""

    stage: int
    """its stage index"""
    rate: float
    """the rate it ran at, req/s"""
    measured_s: float
    """its measured seconds"""
    requests: int
    """measured requests counted"""
    attainment: float | None
    """fraction of them meeting every SLO"""
    lower_bound_95: float | None
    """the one-sided lower 95% bound of that attainment"""
    block_s: float
    """the bootstrap's block length, s"""
    held: bool
    """the lower bound reached the target and the queue did not grow"""
    why: str | None
    """why it did not hold; null when it held"""


@with_config(DOCS)
class CapacityCliff(TypedDict, total=True):
    """where attainment crosses the target, as the search's stages bracketed it"""

    bracket: Annotated[list[float | None], Field(min_length=2, max_length=2)]
    """[highest passing level, lowest failing level], req/s"""
    crossing_rps: float | None
    """the median interpolated crossing over the resamples, req/s"""
    ci95: Annotated[list[float | None], Field(min_length=2, max_length=2)]
    """2.5th percentile of the highest passing level, 97.5th of the lowest failing"""


@with_config(DOCS)
class Capacity(TypedDict, total=True):
    """`loadgen capacity` runs only (also its capacity.json): the highest request rate a confirming run
    held with at least `attainment` of requests meeting every per-request SLO (DistServe's goodput),
    judged by the lower 95% bound of its attainment (block bootstrap over time); the rate it confirmed
    was proposed by the fitted twin or the search (bracketing, bisecting and re-measuring open-loop
    Poisson stages); rates are the levels asked, the Poisson processes' rates"""

    capacity_rps: float | None
    """the confirmed rate, req/s: a confirming run at it held; null when none held"""
    verdict: NotRequired[Literal["confirmed", "unconfirmed", "not_found", "client_limited", "interrupted"]]
    """confirmed (capacity_rps held); unconfirmed (the budget or the confirmations ran out first);
    not_found (no search level met the SLOs); client_limited (the client could not offer the rates);
    interrupted"""
    statement: NotRequired[str | None]
    """the confirmed rate in words: the run's length, its attainment and lower bound"""
    unconfirmed_because: NotRequired[str | None]
    """why no rate was confirmed; null when one was"""
    lower_bound_at_capacity: NotRequired[float | None]
    """the one-sided lower 95% bound of the confirming run's attainment (circular-block bootstrap over
    10 s blocks of arrivals; 1 - 3/n when nothing failed)"""
    proposal: NotRequired[CapacityProposal | None]
    """the first rate confirmed: rate, by (twin or search), the twin's fit and answer (or why it had
    none), above_confirmed (the proposal over the confirmed rate, minus 1)"""
    confirmations: NotRequired[list[CapacityConfirmation]]
    """each confirming run: stage, rate, measured_s, requests, attainment, lower_bound_95, block_s,
    held, why (when it did not hold)"""
    confirm_s: NotRequired[float]
    """measured seconds of a confirming run"""
    cliff: NotRequired[CapacityCliff]
    """where attainment crosses the target, as the search's stages bracketed it: bracket [highest passing
    level, lowest failing level], crossing_rps (median interpolated crossing over the resamples), ci95
    (2.5th percentile of the highest passing level, 97.5th of the lowest failing, over circular-block
    bootstrap resamples of the stages' good flags; its low end at most the next passing level below):
    not a sustainable rate"""
    capacity_level_rps: NotRequired[float | None]
    """the search's highest passing level (the cliff's bracket low end)"""
    ci95: Annotated[list[float | None], Field(min_length=2, max_length=2)]
    """95% interval of capacity_rps: [null, null] for one search (a confirmed rate is a decision, not an
    estimate); the Student t interval over the searches of a repeated one"""
    crossing_rps: NotRequired[float | None]
    """the cliff's crossing_rps, kept at the top level for older readers"""
    attainment: float
    """the target A: the fraction of requests that must meet every SLO"""
    attainment_at_capacity: NotRequired[float | None]
    """the attainment of the confirming run that held"""
    slos: dict[str, float]
    """the per-request SLOs searched against (ttft_ms, tpot_ms, e2e_ms), ms"""
    goodput_rps: float | None
    """requests meeting every SLO per second of the confirming run's measured window"""
    output_tokens_per_s: float | None
    """output tokens per second of the confirming run's measured window"""
    usd_per_million_output_tokens: float | None
    """GPU cost per million output tokens at the confirmed rate: gpu_hour_cost x gpu_count / 3600 /
    output_tokens_per_s x 1e6; null without a price"""
    gpu_hour_cost_usd: NotRequired[float | None]
    """the GPU-hour price used (--gpu-hour-cost or the gpu_hour_cost label)"""
    gpu_count: NotRequired[float | None]
    """GPUs priced (--gpu-count, the gpu_count label, or 1)"""
    stages: list[CapacityStages]
    """every stage in the order run (the same index as summary.stages and the records' `stage`)"""
    stopped_because: str | None
    """null when the search ended on its own rules (precision reached, ends re-measured); else why it
    stopped: stage budget, time budget, --max-rate, client bottleneck, server errors, interrupted"""
    elapsed_s: NotRequired[float]
    """wall seconds the search's stages took, warm-ups and drains included"""
    budget_s: NotRequired[float | None]
    """the time budget (--budget): stages after the bracket share it; null: none, stages of
    --stage-duration"""
    method: str
    """the search and interval method in words, with its settings"""
