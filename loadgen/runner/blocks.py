"""The summary's optional blocks, in one ordered list: what each is called in ``summary.json``,
whether a stage has it too, and how it is built from one measured run.

Why a list: a block used to be wired by hand in four places (an ``if x is not None`` here, a line
in the report, a branch in the console, a type), and a new one touched a dozen files. Now
``summarize`` builds the measured core (counts, window, metrics), loops over ``BLOCKS``, and
judges the SLA last, once, over the finished blocks (a rule may bound the GPUs' energy, which
only the telemetry block has). A stage runs the same loop over the blocks marked ``stage``. The
report (``report/sections.py``) and the console (``cli/console.py``) key their renderers by
these names, and a test fails when a name has no type, no section or no console entry.

A builder is a small adapter: the math stays in the layer that owns it (``analysis/``,
``server/``); here it is only told what it needs from the run. Adding a block is its builder
there, its TypedDict in ``summary/``, an entry here and one in each renderer's map.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from loadgen.analysis import curve, fidelity, metrics, saturation, sla, traffic
from loadgen.analysis.agentic import agentic as agentic_block
from loadgen.analysis.media import media as media_block
from loadgen.analysis.models import models as models_block
from loadgen.analysis.phases import http_phases
from loadgen.analysis.precision import precision_block
from loadgen.analysis.replicas import replicas as replicas_block
from loadgen.analysis.saturation import waiting_samples
from loadgen.analysis.table import RecordTable
from loadgen.backends import registry
from loadgen.config import Profile
from loadgen.redact import redact_url
from loadgen.result import GROUND_TRUTH
from loadgen.runner.execute import Executed
from loadgen.runner.plan import StageOutcome
from loadgen.server import telemetry as gpu_telemetry
from loadgen.server.scraper import server_view
from loadgen.server.speculative import speculative_block
from loadgen.summary import (
    Agentic,
    Capacity,
    Counts,
    Curve,
    Fidelity,
    Media,
    Metrics,
    Models,
    Quality,
    Replicas,
    ServerView,
    Sessions,
    Speculative,
    StageSummary,
    Telemetry,
    Window,
)
from loadgen.summary.stages import PrecisionBlock


@dataclass(frozen=True)
class MeasuredRun:
    """What every block is built from: one run's (or one stage's) records and measured core,
    the validated profile, what was executed, and what the simulator said of itself."""

    table: RecordTable
    window: Window
    counts: Counts
    metrics: Metrics
    profile: Profile
    executed: Executed
    sim_info: dict[str, Any] | None
    run_dir: Path
    stage: StageOutcome | None = None  # the stage these records are; None: the whole run

    @property
    def span(self) -> tuple[int, int] | None:
        start, end = self.window["start_ns"], self.window["end_ns"]
        return (start, end) if start is not None and end is not None else None

    @property
    def scrapes(self) -> list[dict] | None:
        """The server's scrapes, when it was scraped."""
        series = self.executed.server_series
        return series.rows if series is not None and series.available else None


# A builder: the run, and the blocks built before it in the list (the curve reads the stages),
# to its block or None. A block's value is one of the summary's types, each its own: a builder
# that reads another block narrows it (``_curve``).
Built = Mapping[str, object]
Builder = Callable[[MeasuredRun, Built], object]


@dataclass(frozen=True)
class Block:
    """One optional block: its key in ``summary.json`` (and a stage's), its builder (None: the
    run has no such block), and where it is built."""

    name: str
    build: Builder
    run: bool = True  # built for the whole run
    stage: bool = False  # built for each stage of a multi-stage run


def _stages(m: MeasuredRun, _built: Built) -> list[StageSummary] | None:
    """Every stage's own summary, each from its own records (a run of more than one stage)."""
    ex = m.executed
    if ex.planned_stages <= 1:
        return None
    stage_of = m.table.column("stage")
    waiting = waiting_samples(ex.server_series.rows) if ex.server_series is not None else []
    return [stage_summary(m, o, m.table.select(stage_of == o.stage.index), waiting) for o in ex.stages]


def stage_summary(
    run: MeasuredRun, o: StageOutcome, table: RecordTable, waiting: list[tuple[int, float]]
) -> StageSummary:
    """One stage's own summary: on its own measured window (its warm-up and ramp excluded), with
    its over-saturation verdict (from its records and the server's waiting queue), the blocks a
    stage has, and its SLA verdict last."""
    s, profile = o.stage, run.profile
    streamed = registry.backend(profile.target.endpoint).streamed
    counts, window, measured = metrics.measure(table, sla=profile.sla, streamed=streamed)
    m = MeasuredRun(table, window, counts, measured, profile, run.executed, run.sim_info, run.run_dir, o)
    block = cast(
        StageSummary,
        {
            "index": s.index,
            "name": s.name,
            "load": s.load(),
            "interrupted": o.result.interrupted,
            "counts": counts,
            "window": window,
            "metrics": measured,
            "saturation": saturation.assess(table, waiting),
            "steady_state": curve.steady_state(table),
            **build(m),
        },
    )
    block["sla"] = sla.evaluate(profile.sla, block, incomplete=o.result.interrupted)
    return block


def _curve(m: MeasuredRun, built: Built) -> Curve | None:
    stages = cast("list[StageSummary] | None", built.get("stages"))
    return None if stages is None else curve.curve(m.executed.plan.curve_order(stages))


def _capacity(m: MeasuredRun, _built: Built) -> Capacity | None:
    return m.executed.plan.conclude(m.executed.result.interrupted)


def _quality(m: MeasuredRun, _built: Built) -> Quality | None:
    answers = m.profile.output.answers
    sim = m.sim_info
    modelled = sim.get("answers") if sim is not None else None  # the simulator's answers are a model
    return traffic.quality(m.table, answers_kept=answers.keep, max_chars=answers.max_chars, modelled=modelled)


def _precision(m: MeasuredRun, _built: Built) -> PrecisionBlock | None:
    """What the run (a one-stage run) or the stage reached of its ``until``."""
    ex = m.executed
    if m.stage is not None:
        s, result = m.stage.stage, m.stage.result
        return precision_block(m.table, s.until, result.precise, result.until_at_stop) if s.until else None
    until = m.profile.load.until
    if not until or ex.planned_stages != 1 or not ex.stages:
        return None
    first = ex.stages[0].result
    return precision_block(m.table, until, first.precise, first.until_at_stop)


def _sessions(m: MeasuredRun, _built: Built) -> Sessions | None:
    return traffic.sessions(m.table)


def _models(m: MeasuredRun, _built: Built) -> Models | None:
    mix = m.profile.workload.models
    if mix is None:
        return None
    return models_block(m.table, mix.names, mix.choice, m.window["seconds"], m.profile.sla)


def _replicas(m: MeasuredRun, _built: Built) -> Replicas | None:
    """target.urls: each replica's figures (None for one URL)."""
    t = m.profile.target
    if len(t.replica_urls) < 2:
        return None
    urls = [redact_url(u) or "" for u in t.replica_urls]
    return replicas_block(m.table, urls, t.balance, m.window["seconds"])


def _media(m: MeasuredRun, _built: Built) -> Media | None:
    return media_block(m.table, m.window["seconds"])


def _fidelity(m: MeasuredRun, _built: Built) -> Fidelity | None:
    """The built-in simulator served: its log is the truth."""
    return fidelity.assess(m.table, m.run_dir / GROUND_TRUTH) if m.sim_info is not None else None


def _scraped(m: MeasuredRun) -> RecordTable:
    """The requests the scraped ``/metrics`` counted. With target.urls only the first replica's
    is scraped, so only its requests stand beside the server's figures (the client's means
    against the server's, the stream's tokens against its speculative counters)."""
    if len(m.profile.target.replica_urls) < 2:
        return m.table
    index, has = m.table.ints("replica")
    return m.table.select(has & (index == 0))


def _server(m: MeasuredRun, _built: Built) -> ServerView | None:
    series = m.executed.server_series
    if series is None:
        return None
    view = server_view(series, m.window, bool(m.counts["warmup"]), _scraped(m))
    if len(m.profile.target.replica_urls) > 1:
        view["replica"] = 0
    return view


def _speculative(m: MeasuredRun, _built: Built) -> Speculative | None:
    return speculative_block(m.scrapes, m.span, _scraped(m))


def _telemetry(m: MeasuredRun, _built: Built) -> Telemetry | None:
    """The GPUs over the measured window, with the tokens delivered in it (its throughputs x its
    length); None without readings. A stage's window has no warm-up in it."""
    readings, span = m.executed.telemetry, m.span
    if readings is None or span is None:
        return None
    seconds = m.window["seconds"]
    # Total = input + output, which every run has (a pooling run has no output tokens, and no
    # total_tokens_per_s: its energy per token is per input token).
    out_rate = m.metrics.get("output_tokens_per_s") or 0.0
    in_rate = m.metrics.get("input_tokens_per_s") or 0.0
    tokens = (out_rate * seconds, (in_rate + out_rate) * seconds)
    warm = m.stage is None and bool(m.counts["warmup"])
    return gpu_telemetry.telemetry_block(readings, span, tokens, m.profile.telemetry.price_per_kwh, warm)


def _agentic(m: MeasuredRun, built: Built) -> Agentic | None:
    """Per-session figures of agentic rounds (workload.agentic, tools.rounds > 1), with the
    server block's prefix-cache hit (built before it)."""
    w = m.profile.workload
    kind = w.agentic.kind if w.agentic is not None else "tools" if w.tools and w.tools.rounds > 1 else None
    server = cast("ServerView | None", built.get("server"))
    return None if kind is None else agentic_block(m.table, kind, server)


# The order is summary.json's, and the order a later builder may read an earlier block in.
BLOCKS: tuple[Block, ...] = (
    Block("stages", _stages),
    Block("curve", _curve),
    Block("capacity", _capacity),
    Block("quality", _quality),
    Block("precision", _precision, stage=True),
    Block("sessions", _sessions),
    Block("models", _models),
    Block("replicas", _replicas),
    Block("media", _media),
    Block("http_phases", lambda m, _built: http_phases(m.table)),
    Block("fidelity", _fidelity),
    Block("server", _server),
    Block("speculative", _speculative, stage=True),
    Block("telemetry", _telemetry, stage=True),
    Block("agentic", _agentic),
)

# Written by the parent of repeated runs (runner/repeats.py), never by one run's summarize.
POOLED_ONLY: tuple[str, ...] = ("repeats",)
NAMES: tuple[str, ...] = tuple(b.name for b in BLOCKS) + POOLED_ONLY


def build(m: MeasuredRun) -> dict[str, object]:
    """Every block ``m`` has, in ``BLOCKS``' order: the run's, or a stage's when ``m.stage``."""
    built: dict[str, object] = {}
    for block in BLOCKS:
        if block.stage if m.stage is not None else block.run:
            value = block.build(m, built)
            if value is not None:
                built[block.name] = value
    return built
