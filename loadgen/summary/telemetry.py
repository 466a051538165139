"""The GPUs' view of the run: utilisation, memory, power and energy, and energy per token
(``server.telemetry`` builds it from the readings in telemetry.jsonl)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from loadgen.summary.common import DOCS


@with_config(DOCS)
class TelemetrySource(TypedDict, total=True):
    """one place the GPUs were read"""

    kind: Literal["dcgm", "simulator", "nvml"]
    """a DCGM exporter (telemetry.dcgm), the built-in simulator's exporter, or this machine's NVML"""
    url: str | None
    """the exporter's URL (credentials redacted); null for NVML"""
    readings: Annotated[int, Field(ge=0)]
    """readings taken (each of every GPU the source serves)"""
    failed: Annotated[int, Field(ge=0)]
    """readings that failed after the first succeeded"""
    note: str | None
    """why the source gave nothing, or its last failure; null when all went well"""


@with_config(DOCS)
class TelemetryGpu(TypedDict, total=True):
    """one GPU over the measured window (readings inside it; the two around it when none is)"""

    uuid: str
    """the GPU's UUID (DCGM's UUID label, NVML's), or <Hostname>/<index> when the exporter gives none"""
    gpu: str
    """its index on its host"""
    model: str | None
    """its model name (DCGM's modelName)"""
    host: str | None
    """its host (DCGM's Hostname)"""
    source: str
    """the source's URL, or nvml"""
    samples: Annotated[int, Field(ge=0)]
    """readings inside the window"""
    utilization_mean: Annotated[float | None, Field(ge=0, le=1)]
    """mean GPU utilisation (DCGM_FI_DEV_GPU_UTIL / 100): share of time a kernel ran"""
    memory_used_mean_bytes: float | None
    """mean framebuffer memory used (DCGM_FI_DEV_FB_USED)"""
    memory_used_peak_bytes: float | None
    """largest framebuffer memory used read"""
    power_mean_w: float | None
    """mean of the power readings (DCGM_FI_DEV_POWER_USAGE), watts"""
    energy_j: float | None
    """energy over the window from the energy counter (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION): its
    difference, linearly interpolated to the window's edges; null without the counter"""
    counter_resets: Annotated[int, Field(ge=0)]
    """times the energy counter went backwards (reset, wrapped); those intervals' energy is power x time"""
    estimated_s: Annotated[float, Field(ge=0)]
    """seconds of the window whose energy is power x time (around a counter reset), not the counter's"""
    covered_fraction: Annotated[float, Field(ge=0, le=1)]
    """share of the window between this GPU's first and last reading (below 1: it appeared late or
    vanished)"""
    vanished: bool
    """its readings stopped before its source's did (or before the window ended)"""


@with_config(DOCS)
class TelemetryEnergy(TypedDict, total=True):
    """energy and cost per token over the measured window, every GPU read added up"""

    joules: float
    """energy of every GPU over the window (sum of their energy_j)"""
    seconds: float
    """the window's length"""
    gpus: Annotated[int, Field(ge=0)]
    """GPUs whose energy counted"""
    mean_watts: float
    """joules / seconds: the GPUs' average draw at the measured throughput"""
    output_tokens: float
    """output tokens of ok requests in the window (output_tokens_per_s x seconds)"""
    total_tokens: float
    """input plus output tokens of ok requests in the window"""
    j_per_output_token: float | None
    """joules per output token; null when no token was delivered"""
    j_per_total_token: float | None
    """joules per input-plus-output token"""
    output_tokens_per_j: float | None
    """output tokens per joule"""
    kwh: float
    """joules / 3.6e6"""
    price_per_kwh: float | None
    """telemetry.price_per_kwh (USD), when given"""
    usd_per_million_output_tokens: float | None
    """energy cost of a million output tokens at price_per_kwh; null without a price"""
    usd_per_million_total_tokens: float | None
    """energy cost of a million input-plus-output tokens at price_per_kwh"""
    complete: bool
    """every GPU was read across the whole window from its counter alone (no reset, none vanished)"""


@with_config(DOCS)
class Telemetry(TypedDict, total=True):
    """GPU telemetry over the measured window (telemetry.jsonl has every reading)"""

    file: str
    """the readings' file in the run folder"""
    interval_s: float
    """seconds between readings of each source"""
    includes_warmup: bool
    """false: figures cover the measured window only (warm-up excluded)"""
    sources: list[TelemetrySource]
    """where the GPUs were read"""
    gpus: list[TelemetryGpu]
    """one entry per GPU read"""
    energy: NotRequired[TelemetryEnergy]
    """absent when no GPU gave an energy counter (power x time is not used in its place)"""
    notes: list[str]
    """counter resets, vanished GPUs and sources that could not be read, in words"""


@with_config(DOCS)
class ConditionsTelemetry(TypedDict, total=True):
    """where the GPUs were read, or why they were not"""

    sources: list[TelemetrySource]
    """the sources asked for (telemetry.dcgm, telemetry.nvml, the simulator's exporter)"""
    note: str | None
    """why the run has no telemetry block ('no telemetry sources configured', or why none could be
    read); null when it has one"""
