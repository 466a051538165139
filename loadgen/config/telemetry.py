"""The profile's ``telemetry`` section: where the GPUs' utilisation, memory, power and energy
are read during a run, and the electricity price that turns energy into money.

Why its own section and not part of ``server_metrics``: the GPUs are read from where their
numbers live (an NVIDIA DCGM exporter on each node, or this machine's NVML), which is seldom the
inference server's address. Validated once here; the readers (``server.gpu_scraper``) trust it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from loadgen.config.base import StrictModel


class TelemetryConfig(StrictModel):
    """GPU telemetry sources and the energy price. Without a source the run has no telemetry
    block (and its conditions say so); a source that cannot be read is a note, never a failure."""

    # DCGM exporters' metrics URLs to scrape (one per node, e.g. http://gpu-node:9400/metrics).
    dcgm: tuple[str, ...] = ()
    # Read this machine's GPUs through NVML (nvidia-ml-py: pip install 'loadgen[nvml]').
    nvml: bool = False
    # On the built-in simulator (no target.url), scrape its simulated GPUs' /dcgm/metrics.
    simulator: bool = True
    # Seconds between readings of each source.
    interval_s: float = Field(1.0, ge=0.05)
    # Electricity price in USD per kWh: the energy cost per million tokens, beside the GPU-hour cost.
    price_per_kwh: float | None = Field(None, gt=0)

    @field_validator("dcgm", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return (v,) if isinstance(v, str) else v

    @field_validator("dcgm")
    @classmethod
    def _http_urls(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for url in v:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(
                    f"{url!r} is not an http(s) URL; give the exporter's metrics URL, "
                    "e.g. http://gpu-node:9400/metrics"
                )
        if len(set(v)) != len(v):
            raise ValueError("a URL is listed twice; each exporter is scraped once")
        return v
