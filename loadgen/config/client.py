"""The profile's sections on the client's own side of a run: how it spreads its load (worker
processes or Ray actors), whether it scrapes the server's metrics, and what it writes where.
``schema.py`` assembles them into the ``Profile`` (and re-exports them)."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from loadgen.config.base import StrictModel
from loadgen.config.traffic import AnswersConfig
from loadgen.redact import redact_url

MAX_WORKERS = 1024


class ServerMetricsConfig(StrictModel):
    """Scraping the target's Prometheus metrics during the run: one GET of ``path`` every
    ``interval_s`` on a connection of its own, kept in ``server_metrics.jsonl`` and summarized
    beside the client's figures. ``enabled: true`` scrapes when the server serves metrics loadgen
    knows (vLLM, SGLang, TensorRT-LLM, the simulator) and otherwise notes why not in the summary;
    the run goes on either way."""

    # Scrape the server's Prometheus /metrics during the run (its own view, on one clock with the
    # client's).
    enabled: bool = True
    # Seconds between scrapes.
    interval_s: float = Field(1.0, ge=0.05)
    # Where the server serves its metrics.
    path: str = Field("/metrics", pattern=r"^/")


_RAY_ADDRESS = re.compile(r"^(auto|local|(ray://)?[A-Za-z0-9.\[\]:_-]+:[0-9]{1,5})$")


class ClientConfig(StrictModel):
    """How the client spreads its load: ``workers`` processes on this machine (``auto``: the
    usable cores minus one, at least 1), or Ray actors across a cluster (``ray``: ``auto`` for
    the cluster this machine belongs to, ``local`` for a private one, or an address such as
    ``ray://head:10001``; then ``workers`` counts actors and ``auto`` means one per cluster
    CPU minus one). One worker runs in the loadgen process itself."""

    # Processes that drive the load (auto: one per usable core); each its own event loop.
    workers: int | Literal["auto"] = 1
    # Drive the load from Ray actors: auto, local, or ray://head:10001.
    ray: str | None = None

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, v: object) -> object:
        if v == "auto":
            return v
        n = None
        if isinstance(v, int) and not isinstance(v, bool):
            n = v
        elif isinstance(v, str) and v.strip().isdigit():
            n = int(v)
        if n is None or not 1 <= n <= MAX_WORKERS:
            raise ValueError(
                f"use a whole number of worker processes from 1 to {MAX_WORKERS}, or auto; got {v!r}"
            )
        return n

    @field_validator("ray")
    @classmethod
    def _ray_address(cls, v: str | None) -> str | None:
        if v is not None and not _RAY_ADDRESS.match(v):
            raise ValueError(
                f"{v[:80]!r} is not a Ray address: use auto, local, host:port or ray://host:port"
            )
        return v


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class OutputConfig(StrictModel):
    """Where a run's folder goes and what the console shows while it runs."""

    # Folder the run folder is made in.
    dir: str = "reports"
    # The run folder's name (default: time, profile name and a random suffix).
    run_id: str | None = None
    # Show the live progress bar.
    progress: bool = True
    # Whether records keep the answers' text.
    answers: AnswersConfig = AnswersConfig()
    # Log the finished run to an experiment tracker: mlflow or wandb (offline); `--track`.
    track: Literal["mlflow", "wandb"] | None = None
    # Where: an MLflow tracking URI, or W&B's offline folder (default: local, in `dir`); `--track-uri`.
    track_uri: str | None = None
    # How the run keeps its records: "jsonl" (requests.jsonl, about 19 bytes a streamed token)
    # or "columnar" (records.parquet, about 2 bytes a token, written from requests.jsonl when
    # the load ends; chunk times to the microsecond). See docs/design.md, "Record store".
    records: Literal["jsonl", "columnar"] = "jsonl"

    @field_validator("run_id")
    @classmethod
    def _folder_name(cls, v: str | None) -> str | None:
        if v is not None and not _RUN_ID.match(v):
            raise ValueError(
                f"{v[:60]!r} cannot name the run's folder: use 1-128 letters, digits, "
                f"'.', '_' or '-', starting with a letter or digit (no '/' or '..')"
            )
        return v

    @field_validator("track_uri")
    @classmethod
    def _no_login(cls, v: str | None) -> str | None:
        # The profile is recorded in summary.json: a password in the URI would be too.
        parts = urlsplit(v or "")
        if v is not None and ("@" in parts.netloc or (parts.query and redact_url(v) != v)):
            raise ValueError(
                "a login or secret in the tracking URI would be recorded with the run; give it to the "
                "backend instead (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_TOKEN)"
            )
        return v
