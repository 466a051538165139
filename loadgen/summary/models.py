"""The ``models`` block: a LoRA mix's figures per model (base or adapter) it asked for."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, with_config
from typing_extensions import TypedDict

from loadgen.summary.common import DOCS


@with_config(DOCS)
class ModelLatency(TypedDict, total=True):
    """median and 99th percentile of one latency over the model's measured ok requests, ms"""

    p50: float | None
    """median, ms; null without a sample"""
    p99: float | None
    """99th percentile, ms; null without a sample"""


@with_config(DOCS)
class ModelRow(TypedDict, total=True):
    """one model's measured requests; rates are per second of the run's window, so they add up"""

    model: str
    """the model name the requests asked for (workload.models)"""
    sent: Annotated[int, Field(ge=0)]
    """measured requests that asked for it"""
    ok: Annotated[int, Field(ge=0)]
    """of them, those that completed"""
    failed: Annotated[int, Field(ge=0)]
    """of them, those that failed (not ok, not cancelled)"""
    ttft_ms: ModelLatency
    tpot_ms: ModelLatency
    e2e_ms: ModelLatency
    output_tokens_per_s: float | None
    """its ok requests' output tokens per second of the run's window"""
    goodput_requests_per_s: float | None
    """its requests within every SLO set, per second of the run's window"""


@with_config(DOCS)
class Models(TypedDict, total=True):
    """runs with a LoRA mix only (workload.models): the figures per model asked for; each count sums over
    the rows to the run's counts (loadgen/analysis/models.py)"""

    choice: str
    """how each request's model was chosen: weighted (a seeded draw) or round_robin"""
    by_model: list[ModelRow]
    """one row per model of the mix, in the profile's order"""
