"""``experiment.json``: the plan, each cell's state and result, rewritten whole after every change.

Written atomically (a temporary file, then ``rename``): a reader, or ``--resume`` after a
``kill -9``, sees the file as it was before or after a write, never half of one. A cell is
``pending``, ``running`` (loadgen was killed during it when the file says so at resume),
``done`` or ``failed``. ``--resume`` runs every cell that is not ``done``; the folder of a cell
that was running is kept, renamed ``repeat-<r>.interrupted-<k>``, so no record is thrown away.

What it never holds: a secret. The experiment file's ``env`` values and ``serve`` command are
kept as the scrubbed command the run's conditions show; ``--resume`` reads the experiment file
again (its SHA-256 is here, so a file that changed since is refused rather than mixed in).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any, Final, Literal, cast

import orjson

from loadgen.analysis.runs import write_json_atomic
from loadgen.errors import ConfigError
from loadgen.experiment.cells import Cell, Config
from loadgen.report.experiment import EXPERIMENT
from loadgen.summary.experiment import ExperimentCell, ExperimentConfig, ExperimentFile

__all__ = ["EXPERIMENT", "SCHEMA", "State", "digest"]

SCHEMA: Final = "loadgen-experiment/1"
PENDING: Final = "pending"
RUNNING: Final = "running"
DONE: Final = "done"
FAILED: Final = "failed"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def now() -> str:
    """UTC to the millisecond: a cell's start and end are what the next dry run's estimate reads."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class State:
    """The experiment's folder and its ``experiment.json`` (``data``), saved by ``save``."""

    def __init__(self, folder: Path, data: ExperimentFile) -> None:
        self.folder, self.data = folder, data

    @classmethod
    def new(
        cls,
        folder: Path,
        *,
        source: Path,
        name: str,
        method: Literal["sweep", "stages", "capacity"],
        plan: list[Cell],
        configs: list[Config],
        sla: dict[str, float],
        attainment: float,
        repeats: int,
        seed: int,
    ) -> State:
        data: ExperimentFile = {
            "schema": SCHEMA,
            "id": folder.name,
            "name": name,
            "source": str(source.resolve()),
            "source_sha256": digest(source),
            "created_at": now(),
            "updated_at": now(),
            "method": method,
            "sla": sla,
            "attainment": attainment,
            "repeats": repeats,
            "seed": seed,
            "configs": [config_entry(c) for c in configs],
            "order": [c.id for c in plan],
            "cells": {
                c.id: {
                    "config": c.config.id,
                    "repeat": c.repeat,
                    "seed": seed + c.repeat - 1,
                    "state": PENDING,
                    "run_dir": None,
                    "error": None,
                    "attempts": 0,
                    "started_at": None,
                    "ended_at": None,
                }
                for c in plan
            },
            "complete": False,
            "ranking": None,
        }
        state = cls(folder, data)
        state.save()
        return state

    @classmethod
    def load(cls, folder: Path) -> State:
        path = folder / EXPERIMENT
        try:
            data = orjson.loads(path.read_bytes())
        except OSError as exc:
            raise ConfigError(
                [
                    f"--resume {folder}: cannot read {EXPERIMENT}: {exc.strerror or exc}; give the folder "
                    "`loadgen experiment` made (reports/<experiment-id>)"
                ],
                what="experiment",
            ) from None
        except orjson.JSONDecodeError as exc:
            raise ConfigError([f"{path}: not JSON ({exc})"], what="experiment") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ConfigError([f"{path}: not a {SCHEMA} file"], what="experiment")
        return cls(folder, cast(ExperimentFile, data))

    def save(self) -> None:
        self.data["updated_at"] = now()
        write_json_atomic(self.folder / EXPERIMENT, self.data)

    def cell(self, cell_id: str) -> ExperimentCell:
        return self.data["cells"][cell_id]

    def todo(self) -> list[str]:
        """The cells still to run, in the plan's order."""
        return [c for c in self.data["order"] if self.cell(c)["state"] != DONE]

    def update(self, cell_id: str, **fields: Any) -> None:
        """Set ``fields`` of one cell (names of ``ExperimentCell``) and save."""
        cell = cast(dict[str, Any], self.cell(cell_id))
        unknown = set(fields) - set(ExperimentCell.__annotations__)
        if unknown:
            raise KeyError(f"not fields of a cell: {sorted(unknown)}")
        cell.update(fields)
        self.save()


def config_entry(c: Config) -> ExperimentConfig:
    b = c.backend
    return {
        "id": c.id,
        "label": c.label,
        "backend": b.name,
        "kind": b.kind,
        "point": c.point,
        "labels": c.labels,
        "gpu_hour_cost": c.gpu_hour_cost,
        "gpus": c.gpus,
        "results": b.results,
        "reset": list(b.reset),
    }


def cell_folder(experiment: str | Path, config: str) -> str:
    """``loadgen gate --cell``: the folder of ``config`` (or ``config/repeat-<r>``) in an
    experiment folder; a ConfigError lists the configurations when there is no such one."""
    state = State.load(Path(experiment))
    ids = [c["id"] for c in state.data["configs"]]
    if config.split("/")[0] not in ids:
        raise ConfigError(
            [f"--cell {config}: {experiment} has no such configuration; it has: {', '.join(ids)}"],
            what="experiment",
        )
    folder = Path(experiment) / config
    if not (folder / "summary.json").exists():
        raise ConfigError(
            [f"--cell {config}: {folder} has no summary.json (the cell did not finish)"], what="experiment"
        )
    return str(folder)
