"""The summary of a run (summary.json) as types: ``Summary`` and each of its blocks, named once.

Every module that builds a block returns it typed from here, ``runner/summarize.py`` assembles
them in one place, and the report, ``compare``, ``gate`` and ``RunResult`` read the same types;
``schema.py`` generates ``schemas/summary.schema.json`` from them and checks a loaded file
against them. Why TypedDicts, and the rules of the layout: ``common.py``'s docstring. A leaf of
the layering: it imports nothing of loadgen but ``errors`` (in ``schema.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from loadgen.summary.agentic import Agentic, AgenticPrefixCache, AgenticStat
from loadgen.summary.client import ClientHealth, ClientSelfcheck, ClientWarnings, ClientWorkers
from loadgen.summary.common import DOCS, ClientVsServer, Distribution, LengthStats, ServerHistogram
from loadgen.summary.conditions import Conditions
from loadgen.summary.extras import Fidelity, Quality, Sessions
from loadgen.summary.measures import Counts, EndedBy, Metrics, MetricsGoodput, SlaBlock, SlaDetails, Window
from loadgen.summary.media import Media
from loadgen.summary.models import Models
from loadgen.summary.phases import HttpPhases, PhaseDistributions
from loadgen.summary.repeats import RepeatFigure, RepeatRun, Repeats
from loadgen.summary.replicas import ReplicaLatency, ReplicaRow, Replicas, ReplicaTail
from loadgen.summary.server import GaugeStats, ServerView, Speculative
from loadgen.summary.stages import Capacity, CapacityStages, Curve, PrecisionBlock, StageSummary
from loadgen.summary.telemetry import (
    ConditionsTelemetry,
    Telemetry,
    TelemetryEnergy,
    TelemetryGpu,
    TelemetrySource,
)

# The layout's version: fields are added without a bump; a rename or removal bumps it, and
# load_summary refuses versions it does not know.
SCHEMA_VERSION: Literal[1] = 1


@with_config(DOCS)
class Summary(TypedDict, total=True):
    """The run summary loadgen writes to reports/<run-id>/summary.json. Fields are added without a version
    bump; renaming or removing one bumps schema_version, and loadgen refuses versions it does not know.
    Per-request records are in requests.jsonl beside it."""

    schema_version: Literal[1]
    """version of this layout; loadgen.load_summary refuses other versions"""
    run_id: str
    """the run's folder name under the output directory"""
    started_at: Annotated[str, Field(json_schema_extra={"format": "date-time"})]
    """wall-clock start (ISO 8601, UTC); labels the run, never used for latency"""
    ended_at: Annotated[str, Field(json_schema_extra={"format": "date-time"})]
    """wall-clock end (ISO 8601, UTC)"""
    interrupted: bool
    """true when the run was stopped early (Ctrl-C, SIGTERM); in-flight requests were cancelled"""
    conditions: Conditions
    counts: Counts
    window: Window
    metrics: Metrics
    sla: SlaBlock
    client: ClientHealth
    server: NotRequired[ServerView]
    telemetry: NotRequired[Telemetry]
    complete: NotRequired[bool]
    """true when the run sent everything its limits asked for (the count, or the duration); false when it was
    stopped early (Ctrl-C, SIGTERM) or its records could not be written; an incomplete run's SLA verdict
    is 'incomplete'"""
    incomplete_reason: NotRequired[str | None]
    """why the run is incomplete (null when complete)"""
    ended_by: NotRequired[EndedBy]
    stages: NotRequired[list[StageSummary]]
    """multi-stage runs only (load.stages or load.sweep): one summary per stage, each on its own measured
    window (its warm-up and ramp excluded), in the order run"""
    curve: NotRequired[Curve]
    capacity: NotRequired[Capacity]
    fidelity: NotRequired[Fidelity]
    quality: NotRequired[Quality]
    sessions: NotRequired[Sessions]
    agentic: NotRequired[Agentic]
    models: NotRequired[Models]
    replicas: NotRequired[Replicas]
    media: NotRequired[Media]
    http_phases: NotRequired[HttpPhases]
    speculative: NotRequired[Speculative]
    precision: NotRequired[PrecisionBlock]
    """a one-stage run with load.until: the precision its stage reached (a multi-stage run's
    stages carry their own)"""
    repeats: NotRequired[Repeats]


__all__ = [
    "SCHEMA_VERSION",
    "Agentic",
    "AgenticPrefixCache",
    "AgenticStat",
    "Capacity",
    "CapacityStages",
    "ClientHealth",
    "ClientSelfcheck",
    "ClientVsServer",
    "ClientWarnings",
    "ClientWorkers",
    "Conditions",
    "ConditionsTelemetry",
    "Counts",
    "Curve",
    "Distribution",
    "EndedBy",
    "Fidelity",
    "GaugeStats",
    "HttpPhases",
    "LengthStats",
    "Media",
    "Metrics",
    "MetricsGoodput",
    "Models",
    "PhaseDistributions",
    "Quality",
    "RepeatFigure",
    "RepeatRun",
    "Repeats",
    "ReplicaLatency",
    "ReplicaRow",
    "ReplicaTail",
    "Replicas",
    "ServerHistogram",
    "ServerView",
    "Sessions",
    "SlaBlock",
    "SlaDetails",
    "Speculative",
    "StageSummary",
    "Summary",
    "Telemetry",
    "TelemetryEnergy",
    "TelemetryGpu",
    "TelemetrySource",
    "Window",
]
