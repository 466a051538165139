"""An experiment in a tracker: one parent run, one child run per cell, logged as each cell ends.

The parent is opened when the experiment starts (or resumes) and closed when it ends, with
the experiment's plan as parameters, each ranked configuration's capacity as a metric and
experiment.json / .md / .html as artifacts. A cell is logged once, when it is done, tagged with
its configuration's axes (backend and matrix values), its repeat and its cell id.

``tracking.json`` in the experiment folder says where: the backend, the URI (never one with a
login: ``check_uri``), the parent's id and each logged cell's child id, rewritten atomically
after every cell. So ``--resume`` reopens the same parent and logs only the cells not logged
yet: a cell that finished while the tracker was down, or just before a ``kill -9``, is logged
then, and a cell already logged is never logged twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, TypedDict, cast

import orjson

from loadgen.redact import Scrubber
from loadgen.summary.experiment import ExperimentFile
from loadgen.tracking import facts
from loadgen.tracking.base import Status, TrackedRun, Tracker, TrackingError, shown_uri

__all__ = ["SCHEMA", "TRACKING", "ExperimentTracking", "TrackingFile", "saved"]

TRACKING: Final = "tracking.json"
SCHEMA: Final = "loadgen-tracking/1"
# The experiment file's plan, logged as the parent's parameters.
_PLAN: Final = ("name", "source_sha256", "method", "sla", "attainment", "repeats", "seed")
_FILES: Final = ("experiment.json", "experiment.md", "experiment.html")


class TrackingFile(TypedDict):
    """tracking.json: where an experiment is tracked and what of it is logged."""

    schema: str
    backend: str  # a name of base.BACKENDS
    uri: str | None  # as given (never with a login), None for the default local store
    parent_run_id: str
    logged: dict[str, str]  # cell id -> its child run's id


def saved(folder: Path) -> TrackingFile | None:
    """The folder's tracking.json, or None."""
    path = folder / TRACKING
    if not path.is_file():
        return None
    data = orjson.loads(path.read_bytes())
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise TrackingError(f"{path}: not a {SCHEMA} file")
    return cast(TrackingFile, data)


class ExperimentTracking:
    """One experiment's parent run in ``tracker`` and the cells logged under it."""

    def __init__(
        self,
        tracker: Tracker,
        folder: Path,
        data: TrackingFile,
        scrubber: Scrubber | None,
        records: bool = False,
    ) -> None:
        self.tracker, self.folder, self.data, self.scrubber = tracker, folder, data, scrubber
        self.records = records  # log each cell's request records too

    @classmethod
    def open(
        cls,
        tracker: Tracker,
        folder: Path,
        state: ExperimentFile,
        *,
        uri: str | None = None,
        scrubber: Scrubber | None = None,
        records: bool = False,
    ) -> ExperimentTracking:
        """Open the parent run (reopen it when tracking.json names one) and save tracking.json."""
        before = saved(folder)
        if before is not None and before["backend"] != tracker.kind:
            raise TrackingError(
                f"{folder} is tracked in {before['backend']} ({folder / TRACKING}); resume it with "
                f"--track {before['backend']}, or start a new experiment to track it in {tracker.kind}"
            )
        parent = tracker.open_parent(_parent(state), before["parent_run_id"] if before else None)
        data: TrackingFile = before or {
            "schema": SCHEMA,
            "backend": tracker.kind,
            "uri": None if uri is None else shown_uri(uri),
            "parent_run_id": parent,
            "logged": {},
        }
        out = cls(tracker, folder, data, scrubber, records)
        out._save()
        return out

    @property
    def parent(self) -> str:
        return str(self.data["parent_run_id"])

    def cell_done(self, state: ExperimentFile, cell_id: str) -> str | None:
        """Log a done cell as a child of the parent; its child id, or None when it was logged
        before. TrackingError when the backend fails (the cell stays unlogged)."""
        if cell_id in self.data["logged"]:
            return None
        cell = state["cells"][cell_id]
        if cell["run_dir"] is None:
            return None
        run = _cell_run(state, cell_id, self.folder / cell["run_dir"], self.scrubber, self.records)
        child = self.tracker.log_run(run, parent=self.parent)
        self.data["logged"][cell_id] = child
        self._save()
        return child

    def catch_up(self, state: ExperimentFile) -> list[str]:
        """Log every done cell not logged yet (a resumed experiment); the cells logged now."""
        out = []
        for cell_id in state["order"]:
            if state["cells"][cell_id]["state"] == "done" and self.cell_done(state, cell_id) is not None:
                out.append(cell_id)
        return out

    def close(self, state: ExperimentFile, status: Status) -> None:
        """The experiment's figures and files on the parent, which ends with ``status``."""
        run = _parent(state)
        ranking = state.get("ranking")
        metrics = {
            "cells_done": float(sum(c["state"] == "done" for c in state["cells"].values())),
            "cells_failed": float(sum(c["state"] == "failed" for c in state["cells"].values())),
        }
        for row in ranking["rows"] if ranking else []:
            mean = row["figures"]["capacity_rps"]["mean"]
            if mean is not None:
                metrics[facts.safe_key(f"capacity_rps/{row['config']}")] = float(mean)
        files = [self.folder / n for n in _FILES if (self.folder / n).is_file()]
        self.tracker.close_parent(
            self.parent, TrackedRun(run.name, run.group, run.params, metrics, files, run.tags), status
        )

    def _save(self) -> None:
        path = self.folder / TRACKING
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(self.data, option=orjson.OPT_INDENT_2))
        tmp.replace(path)


def _parent(state: ExperimentFile) -> TrackedRun:
    plan: dict[str, object] = {k: v for k, v in state.items() if k in _PLAN}
    plan["cells"] = len(state["order"])
    plan["configs"] = len(state["configs"])
    params = facts.params({"conditions": plan})
    tags = {"loadgen.experiment": state["id"], "loadgen.kind": "experiment"}
    return TrackedRun(state["id"], state["name"], params, {}, [], tags)


def _cell_run(
    state: ExperimentFile, cell_id: str, run_dir: Path, scrubber: Scrubber | None, records: bool
) -> TrackedRun:
    cell = state["cells"][cell_id]
    config = next(c for c in state["configs"] if c["id"] == cell["config"])
    tags = {
        "loadgen.experiment": state["id"],
        "loadgen.cell": cell_id,
        "loadgen.config": config["id"],
        "loadgen.repeat": str(cell["repeat"]),
        **{facts.safe_key(k): str(v) for k, v in config["labels"].items()},
    }
    base = facts.run_facts(run_dir, scrubber=scrubber, records=records, group=state["name"], tags=tags)
    return TrackedRun(
        cell_id.replace("/", "--"), base.group, base.params, base.metrics, base.artifacts, base.tags
    )
