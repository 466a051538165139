"""``--track mlflow|wandb``: the flags, and the CLI's side of tracking (the rest is ``loadgen.tracking``).

The tracker is opened before any load (a backend that is not installed, or a URI with a login,
is exit 2 then, not after the benchmark spent its minutes), and written to after the run's
folder is complete: a tracker that fails (down, refusing, locked) is a warning on stderr, the
run's files and exit code are what they would have been without ``--track``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.redact import REDACTED, Scrubber

if TYPE_CHECKING:
    from loadgen.summary.experiment import ExperimentFile
    from loadgen.tracking import ExperimentTracking, Tracker

__all__ = ["add_flags", "experiment_tracking", "log_run", "open_for", "warn"]

# MLflow retries a refused HTTP call 7 times with backoff (minutes); a tracker that is down
# should cost a warning in seconds. Only defaults: the user's own MLFLOW_* settings win.
_MLFLOW_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def add_flags(parser: Any, *, profile: bool) -> None:
    where = " (profile output.track)" if profile else ""
    parser.add_argument(
        "--track",
        choices=("mlflow", "wandb"),
        help=f"log the results to MLflow or W&B (offline){where}; pip install 'loadgen[mlflow]' / "
        "'loadgen[wandb]'",
    )
    parser.add_argument(
        "--track-uri",
        metavar="URI",
        help="MLflow tracking URI (http://host:5000, sqlite:///x.db) or W&B's offline folder "
        "(default: the runs' folder: <out>/mlflow.db, <out>/wandb)",
    )
    parser.add_argument(
        "--track-records",
        action="store_true",
        help="log the request records (requests.jsonl / .parquet) as artifacts too: the bulk of a run",
    )


def open_for(kind: str | None, uri: str | None, out: Path) -> Tracker | None:
    """The tracker, or None without ``--track``; MissingBackend / TrackingError (exit 2) when
    it cannot be used at all."""
    if kind is None:
        return None
    from loadgen.tracking import open_tracker

    for name, value in _MLFLOW_ENV.items():
        os.environ.setdefault(name, value)
    for name in ("mlflow", "alembic"):  # their INFO lines are not the benchmark's console
        logging.getLogger(name).setLevel(logging.WARNING)
    return open_tracker(kind, uri, out)


def log_run(tracker: Tracker | None, run_dir: Path, scrubber: Scrubber, *, records: bool = False) -> None:
    """Log a finished run folder; a failure is a warning."""
    if tracker is None:
        return
    from loadgen.tracking import TrackingError, track_run

    try:
        run_id = track_run(tracker, run_dir, scrubber=scrubber, records=records)
    except TrackingError as exc:
        warn(f"{exc}; the run is not tracked, its results are in {run_dir}")
        return
    print(f"tracked  {tracker.kind} run {run_id} ({_where(tracker)})", file=sys.stderr)


def experiment_tracking(
    a: argparse.Namespace, folder: Path, state: ExperimentFile, scrubber: Scrubber
) -> ExperimentTracking | None:
    """The experiment's parent run: as ``--track`` asks, or as its tracking.json says (a resumed
    experiment), with every done cell not logged yet logged now. None without tracking, or
    (with a warning) when the tracker cannot be reached: the experiment runs anyway."""
    from loadgen.errors import ConfigError
    from loadgen.tracking import ExperimentTracking, TrackingError
    from loadgen.tracking.experiment import saved

    before = saved(folder)
    if before is not None and a.track not in (None, before["backend"]):
        raise ConfigError(
            [
                f"--track {a.track}: {folder} is tracked in {before['backend']} (its tracking.json); "
                f"resume it with --track {before['backend']} (or without --track), or start a new experiment"
            ],
            what="flags",
        )
    kind = a.track or (before["backend"] if before else None)
    uri = a.track_uri or (before["uri"] if before else None)
    if uri is not None and REDACTED in uri:
        raise ConfigError([f"{folder}'s tracker URI had a login ({uri}): give --track-uri"], what="flags")
    tracker = open_for(kind, uri, folder.parent)
    if tracker is None:
        return None
    try:
        tracking = ExperimentTracking.open(
            tracker, folder, state, uri=uri, scrubber=scrubber, records=a.track_records
        )
        caught = tracking.catch_up(state)
    except TrackingError as exc:
        warn(f"{exc}; the experiment runs untracked (--resume {folder} --track {kind} logs its cells later)")
        return None
    if caught:
        print(f"  tracked {len(caught)} cells done before", file=sys.stderr)
    print(f"tracking {tracker.kind} parent run {tracking.parent} ({_where(tracker)})", file=sys.stderr)
    return tracking


def warn(message: str) -> None:
    print(f"loadgen: warning: tracking: {message}", file=sys.stderr)


def _where(tracker: Tracker) -> str:
    from loadgen.tracking import shown_uri

    uri = getattr(tracker, "uri", None)
    return shown_uri(uri) if uri else str(getattr(tracker, "dir", ""))
