"""The seam every tracking backend plugs into: three calls, and the errors they raise.

A backend is a plain class (``mlflow_store.MlflowTracker``, ``wandb_store.WandbTracker``)
chosen by name from ``BACKENDS``. ``log_run`` writes one finished run whole (created, logged,
ended in one call, so a run is never left half-logged by a crash between calls);
``open_parent`` / ``close_parent`` bracket an experiment, whose cells are ``log_run`` calls
naming the parent. Whatever the backend library raises comes out as ``TrackingError``, so the
caller has one thing to catch: tracking is a copy of the results, and its failure must never
cost the benchmark its own files.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, Protocol
from urllib.parse import urlsplit

from loadgen.errors import LoadgenError
from loadgen.redact import redact_url

__all__ = [
    "BACKENDS",
    "MissingBackend",
    "Status",
    "TrackedRun",
    "Tracker",
    "TrackingError",
    "backend_errors",
    "check_installed",
    "check_uri",
    "shown_uri",
]

Status = Literal["FINISHED", "FAILED", "KILLED"]
# Backend name -> the module that must be importable (and the extra that installs it).
BACKENDS: Final = {"mlflow": "mlflow", "wandb": "wandb"}


class TrackingError(LoadgenError):
    """The tracking backend refused or could not be reached; the run's own files are intact."""


class MissingBackend(LoadgenError, ImportError):
    """``--track X`` without X installed: the message names the extra."""


@dataclass(frozen=True)
class TrackedRun:
    """One run as a backend logs it (built by ``facts`` from the run folder)."""

    name: str  # the run's id: its folder's name
    group: str  # MLflow's experiment, W&B's project: the profile's or experiment's name
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    artifacts: list[Path] = field(default_factory=list)
    tags: Mapping[str, str] = field(default_factory=dict)
    # A multi-stage run's stages: (stage index, its figures), a metric series with the index as step.
    steps: Sequence[tuple[int, Mapping[str, float]]] = ()


class Tracker(Protocol):
    kind: str

    def log_run(self, run: TrackedRun, parent: str | None = None) -> str:
        """Create, log and end one run (a child of ``parent`` when given); its id."""
        ...

    def open_parent(self, run: TrackedRun, run_id: str | None = None) -> str:
        """Start an experiment's parent run, or reopen ``run_id`` (a resumed experiment); its id."""
        ...

    def close_parent(self, run_id: str, run: TrackedRun, status: Status) -> None:
        """Log the experiment's figures and files on its parent run and end it with ``status``."""
        ...


def check_installed(kind: str) -> None:
    """MissingBackend naming the extra when ``kind``'s library is not importable: said before
    the run starts, not after the benchmark has spent its minutes."""
    if importlib.util.find_spec(BACKENDS[kind]) is None:
        raise MissingBackend(f"--track {kind} needs {BACKENDS[kind]}: pip install 'loadgen[{kind}]'")


def shown_uri(uri: str) -> str:
    """``uri`` as a message or a file may show it: without a login or secret query values
    (``redact_url``), and otherwise as given (``sqlite:////abs/path`` keeps its four slashes)."""
    parts = urlsplit(uri)
    return redact_url(uri) or "" if "@" in parts.netloc or parts.query else uri


def check_uri(uri: str | None) -> str | None:
    """A tracking URI that can be written down: one with a login in it would put the password
    into the recorded profile and the experiment's tracking.json, so it is refused."""
    if uri is not None and shown_uri(uri) != uri:
        raise TrackingError(
            f"tracking URI {shown_uri(uri)}: a login or secret in the URI would be written to the "
            "run's files; give it to the backend instead (MLFLOW_TRACKING_USERNAME / "
            "MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN, WANDB_API_KEY)"
        )
    return uri


@contextmanager
def backend_errors(where: str, doing: str) -> Iterator[None]:
    """Whatever a tracking backend raises (its own exceptions, a refused connection, a locked
    file) as one ``TrackingError`` naming the store (``where``, without a login) and what it
    was doing: the caller warns with it and the benchmark's results stand."""
    try:
        yield
    except TrackingError:
        raise
    except Exception as exc:  # noqa: BLE001 - a backend's failure of any kind is one error
        first = (str(exc) or type(exc).__name__).splitlines()[0]
        raise TrackingError(f"{where}: cannot {doing}: {first}") from None
