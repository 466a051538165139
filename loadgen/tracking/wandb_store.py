"""Weights & Biases, offline: each run an offline W&B run, an experiment a group.

Offline always: the runs are written under ``<dir>/wandb/offline-run-*`` (``dir`` is the URI
given, else the run folders' parent) and ``wandb sync <folder>`` uploads them when you choose;
a benchmark never waits on, or fails by, a network it did not measure. W&B has no nested
runs, so an experiment is W&B's own grouping: every cell has ``group`` = the experiment's id and
``job_type`` ``cell``, and the parent is one more run of the group (``job_type``
``experiment``) with the experiment's parameters, written when the experiment finishes under
an id chosen when it starts (a resumed experiment writes it again under the same id).

The run's conditions are its config, its figures its summary, its files saved into the run
(``files/``). No console capture, system sampling, code or git probing: the benchmark's own
console and CPU are not W&B's to take.
"""

from __future__ import annotations

import secrets
import shutil
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from loadgen.tracking.base import Status, TrackedRun, backend_errors

__all__ = ["WandbTracker"]


class WandbTracker:
    kind = "wandb"

    def __init__(self, uri: str | None, out: Path) -> None:
        self.dir = Path(uri) if uri else out
        with self._errors("start"):
            import wandb

            self._wandb: Any = wandb
            self.dir.mkdir(parents=True, exist_ok=True)

    def log_run(self, run: TrackedRun, parent: str | None = None) -> str:
        config = {**run.params, **({"parent_run_id": parent} if parent else {})}
        return self._write(run, config, job_type="cell" if parent else "run", run_id=None)

    def open_parent(self, run: TrackedRun, run_id: str | None = None) -> str:
        if run_id is not None:
            return run_id
        return secrets.token_hex(4)  # W&B's own ids are 8 characters too

    def close_parent(self, run_id: str, run: TrackedRun, status: Status) -> None:
        self._write(run, dict(run.params), job_type="experiment", run_id=run_id, exit_code=_EXIT[status])

    def _write(
        self,
        run: TrackedRun,
        config: dict[str, str],
        *,
        job_type: str,
        run_id: str | None,
        exit_code: int = 0,
    ) -> str:
        w = self._wandb
        with self._errors(f"log {run.name}"):
            settings = w.Settings(
                mode="offline",
                console="off",
                silent=True,
                save_code=False,
                disable_git=True,
                x_disable_stats=True,
                x_disable_machine_info=True,
                x_save_requirements=False,
            )
            live = w.init(
                dir=str(self.dir),
                project=run.group,
                name=run.name,
                id=run_id,
                resume="allow" if run_id else None,
                group=run.tags.get("loadgen.experiment"),
                job_type=job_type,
                tags=[f"{k}={v}" for k, v in run.tags.items() if not k.startswith("loadgen.")][:64],
                config=config,
                settings=settings,
                reinit="create_new",
            )
            try:
                for step, figures in run.steps:
                    live.log(dict(figures), step=step)
                live.summary.update(dict(run.metrics))
                for k, v in run.tags.items():  # the tags whole, for a reader (W&B's tags are short)
                    live.summary[f"tag/{k}"] = v
                for path in run.artifacts:  # copied, not wandb.save's symlinks: the run folder may move
                    shutil.copy2(path, Path(live.dir) / path.name)
            finally:
                live.finish(exit_code=exit_code)
            return str(live.id)

    def _errors(self, doing: str) -> AbstractContextManager[None]:
        return backend_errors(f"W&B (offline, {self.dir})", doing)


_EXIT: dict[str, int] = {"FINISHED": 0, "FAILED": 1, "KILLED": 130}
