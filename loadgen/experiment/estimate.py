"""How long an experiment will take: the dry run's estimate, cell by cell.

A cell takes its server's start, its stages, and what each stage adds after its duration (the
requests still in flight finish, the run scrapes the server before the next stage), plus the
run's own start and end (the simulator, the probe, the summary). A ramp and a warm-up run inside
a timed stage (the driver ends a stage ``duration_s`` after it began, ramp and warm-up included),
so they add nothing to it; a stage of a request count at a rate lasts its requests and its
warm-up at that rate. The constants are what the levers experiment measured (the guide,
docs/guides/experiments.md, says where); a server's start and a drain depend on the machine and
the load, so an earlier run of the same file (the same SHA-256) in the output folder is better:
its cells' measured times replace the model's, configuration by configuration.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson

from loadgen.config import Profile
from loadgen.config.stages import Stage, resolve_stages
from loadgen.experiment.cells import Cell
from loadgen.experiment.spec import Experiment
from loadgen.experiment.state import DONE, EXPERIMENT, SCHEMA, digest
from loadgen.summary.experiment import ExperimentFile

__all__ = [
    "CELL_S",
    "FINISH_S",
    "SERVER_START_S",
    "STAGE_TAIL_S",
    "UNTIMED_STAGE_S",
    "Measured",
    "cell_seconds",
    "earlier_run",
    "finish_seconds",
    "measured",
    "model_seconds",
]

SERVER_START_S = 30.0  # a `serve:` server's start until ready: a guess, until a run measures it
CELL_S = 0.6  # a run's own start and end: the simulator, the probe, the summary and its files
STAGE_TAIL_S = 0.9  # after a stage's duration: its requests in flight finish, the server scraped
FINISH_S = 3.0  # once: reading the file, planning, pooling each configuration, the ranking, the report
UNTIMED_STAGE_S = 30.0  # a closed loop of a request count: how fast it goes is what it measures


@dataclass(frozen=True)
class Measured:
    """An earlier run's measured times: each configuration's mean cell, and the finish."""

    folder: Path
    cell_s: dict[str, float]  # configuration id -> the mean of its done cells' seconds
    cells: int  # done cells measured
    finish_s: float | None  # from the last cell's end to the file's last write


def _stage_seconds(stage: Stage) -> float:
    if stage.duration_s is not None:
        return stage.duration_s
    if stage.num_requests is not None and stage.rate:
        return (stage.num_requests + stage.warmup_requests) / stage.rate
    return UNTIMED_STAGE_S


def model_seconds(exp: Experiment, profile: Profile, cell: Cell) -> float:
    """What one cell is expected to take without a measurement (see the module's docstring)."""
    start = CELL_S + (SERVER_START_S if cell.config.backend.serve else 0.0)
    cap = exp.load.capacity
    if cap is not None:  # the search's budget, else its every stage; then the confirming run
        search = cap.budget_s or cap.max_stages * (cap.stage_duration_s + cap.warmup_s + STAGE_TAIL_S)
        return start + search + (cap.confirm_s or 0.0)
    stages = resolve_stages(profile.load, profile.workload)
    return start + sum(_stage_seconds(s) + STAGE_TAIL_S for s in stages)


def cell_seconds(exp: Experiment, profile: Profile, cell: Cell, earlier: Measured | None) -> float:
    """The cell's measured time when an earlier run measured its configuration, else the model's."""
    if earlier is not None and cell.config.id in earlier.cell_s:
        return earlier.cell_s[cell.config.id]
    return model_seconds(exp, profile, cell)


def _time(text: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def measured(data: ExperimentFile, folder: Path) -> Measured | None:
    """The measured times in an experiment's state: each done cell's start to end, averaged by
    configuration; None when no cell is done."""
    per: dict[str, list[float]] = {}
    ends = []
    for cell in data["cells"].values():
        t0, t1 = _time(cell.get("started_at")), _time(cell.get("ended_at"))
        if cell["state"] != DONE or t0 is None or t1 is None:
            continue
        per.setdefault(cell["config"], []).append((t1 - t0).total_seconds())
        ends.append(t1)
    if not per:
        return None
    written = _time(data.get("updated_at"))
    finish = (written - max(ends)).total_seconds() if data.get("complete") and written else None
    return Measured(
        folder,
        {k: statistics.fmean(v) for k, v in per.items()},
        sum(len(v) for v in per.values()),
        finish,
    )


def earlier_run(out: Path, source: Path) -> Measured | None:
    """The newest experiment folder under ``out`` made from this file's exact text (its SHA-256)
    that has a done cell, measured; None when there is none."""
    if not out.is_dir():
        return None
    sha = digest(source)
    found = []
    for path in out.glob(f"*/{EXPERIMENT}"):
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA and data.get("source_sha256") == sha:
            m = measured(cast(ExperimentFile, data), path.parent)  # its schema and digest checked
            if m is not None:
                found.append((str(data.get("created_at")), m))
    return max(found, key=lambda x: x[0])[1] if found else None


def finish_seconds(earlier: Measured | None) -> float:
    return earlier.finish_s if earlier is not None and earlier.finish_s is not None else FINISH_S
