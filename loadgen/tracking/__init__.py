"""Experiment tracking: a finished run, or an experiment's cells, logged to MLflow or W&B.

    tracker = open_tracker("mlflow", uri=None, out=Path("reports"))   # reports/mlflow.db
    track_run(tracker, run_dir)                                       # one run folder
    ExperimentTracking.open(tracker, folder, state)                   # parent run + its cells

What is logged is ``facts``' (one list for every backend); how is each backend's module. A
run folder is complete before it is tracked, so a tracking failure (``TrackingError``) costs
the copy in the tracker and never the run: the CLI warns and goes on, and ``loadgen
experiment --resume`` logs a cell it could not log then.
"""

from __future__ import annotations

from pathlib import Path

from loadgen.redact import Scrubber
from loadgen.tracking.base import (
    BACKENDS,
    MissingBackend,
    Status,
    TrackedRun,
    Tracker,
    TrackingError,
    check_installed,
    check_uri,
    shown_uri,
)
from loadgen.tracking.experiment import ExperimentTracking
from loadgen.tracking.facts import run_facts

__all__ = [
    "BACKENDS",
    "ExperimentTracking",
    "MissingBackend",
    "Status",
    "TrackedRun",
    "Tracker",
    "TrackingError",
    "check_installed",
    "check_uri",
    "open_tracker",
    "run_facts",
    "shown_uri",
    "track_run",
]


def open_tracker(kind: str, uri: str | None, out: Path) -> Tracker:
    """The backend ``kind`` writing to ``uri`` (default: local, under ``out``). MissingBackend
    when its library is not installed, TrackingError when the URI holds a login or the store
    cannot be opened."""
    check_installed(kind)
    check_uri(uri)
    if kind == "mlflow":
        from loadgen.tracking.mlflow_store import MlflowTracker

        return MlflowTracker(uri, out)
    from loadgen.tracking.wandb_store import WandbTracker

    return WandbTracker(uri, out)


def track_run(
    tracker: Tracker, run_dir: Path, *, scrubber: Scrubber | None = None, records: bool = False
) -> str:
    """Log one finished run folder; the backend's id of the run."""
    return tracker.log_run(run_facts(run_dir, scrubber=scrubber, records=records))
