"""MLflow: a run is an MLflow run, an experiment a parent run with one nested run per cell.

Through ``MlflowClient`` only (never the ``mlflow.start_run`` globals), so nothing leaks into
a notebook's active run and the store is the one named here. Without a URI the store is local:
``<out>/mlflow.db`` (SQLite) with artifacts in ``<out>/mlartifacts``, beside the run folders,
so every run of that folder lands in one store (``mlflow ui --backend-store-uri
sqlite:///reports/mlflow.db``). Not a ``./mlruns`` folder: MLflow 3 refuses its file store
unless ``MLFLOW_ALLOW_FILE_STORE=true`` is set (it is still accepted as ``file:`` URI then).

Nesting is MLflow's own: a child carries the ``mlflow.parentRunId`` tag, which is what
``mlflow.start_run(nested=True)`` writes and what the UI folds by.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Final, TypeVar

from loadgen.tracking.base import Status, TrackedRun, backend_errors, shown_uri

__all__ = ["MlflowTracker", "default_uri"]

PARENT_TAG: Final = "mlflow.parentRunId"
_BATCH: Final = 100  # MLflow's most params (or tags) in one log_batch


def default_uri(out: Path) -> str:
    return f"sqlite:///{(out / 'mlflow.db').resolve()}"


class MlflowTracker:
    kind = "mlflow"

    def __init__(self, uri: str | None, out: Path) -> None:
        from mlflow.tracking import MlflowClient

        self.uri = uri or default_uri(out)
        # Our own store gets its artifact root beside it (MLflow's default is ./mlruns of the
        # current folder); a URI the user gave keeps its server's or its own default.
        self._artifact_root = None if uri else (out / "mlartifacts").resolve()
        with self._errors("open the store"):
            self.client = MlflowClient(tracking_uri=self.uri)
        self._experiments: dict[str, str] = {}

    def log_run(self, run: TrackedRun, parent: str | None = None) -> str:
        tags = {**run.tags, **({PARENT_TAG: parent} if parent else {})}
        run_id = self._create(run, tags)
        self._log(run_id, run)
        with self._errors(f"end run {run.name}"):
            self.client.set_terminated(run_id, "FINISHED")
        return run_id

    def open_parent(self, run: TrackedRun, run_id: str | None = None) -> str:
        if run_id is not None:
            with self._errors(f"reopen run {run_id}"):
                self.client.update_run(run_id, status="RUNNING")
            return run_id
        run_id = self._create(run, dict(run.tags))
        with self._errors(f"log the parameters of {run.name}"):
            self._batch(run_id, params=run.params)
        return run_id

    def close_parent(self, run_id: str, run: TrackedRun, status: Status) -> None:
        self._log(run_id, TrackedRun(run.name, run.group, {}, run.metrics, run.artifacts))
        with self._errors(f"end run {run.name}"):
            self.client.set_terminated(run_id, status)

    def _create(self, run: TrackedRun, tags: Mapping[str, str]) -> str:
        with self._errors(f"create run {run.name}"):
            created = self.client.create_run(self._experiment(run.group), run_name=run.name, tags=dict(tags))
        return str(created.info.run_id)

    def _log(self, run_id: str, run: TrackedRun) -> None:
        with self._errors(f"log {run.name}"):
            self._batch(run_id, params=run.params, metrics=run.metrics, steps=run.steps)
            for path in run.artifacts:
                self.client.log_artifact(run_id, str(path))

    def _batch(
        self,
        run_id: str,
        params: Mapping[str, str] = {},
        metrics: Mapping[str, float] = {},
        steps: Sequence[tuple[int, Mapping[str, float]]] = (),
    ) -> None:
        from mlflow.entities import Metric, Param

        stamp = _now_ms()
        for chunk in _chunks([Param(k, v) for k, v in params.items()], _BATCH):
            self.client.log_batch(run_id, params=chunk)
        if metrics:
            self.client.log_batch(run_id, metrics=[Metric(k, v, stamp, 0) for k, v in metrics.items()])
        for step, figures in steps:
            self.client.log_batch(run_id, metrics=[Metric(k, v, stamp, step) for k, v in figures.items()])

    def _experiment(self, name: str) -> str:
        if name not in self._experiments:
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                self._experiments[name] = str(found.experiment_id)
            else:
                where = None if self._artifact_root is None else (self._artifact_root / name).as_uri()
                self._experiments[name] = str(self.client.create_experiment(name, artifact_location=where))
        return self._experiments[name]

    def _errors(self, doing: str) -> AbstractContextManager[None]:
        return backend_errors(f"MLflow at {shown_uri(self.uri)}", doing)


T = TypeVar("T")


def _chunks(items: Sequence[T], n: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
