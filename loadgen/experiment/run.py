"""``loadgen experiment``: plan, run every cell in order, pool, rank, report.

    reports/<experiment-id>/
        experiment.json            the plan and each cell's state and result (state.py)
        experiment.md, .html       the ranking, curves, Pareto plot (report/experiment.py)
        <config>/                  one configuration: a repeated run folder (runner/repeats.py)
            repeat-<r>/            one cell: an ordinary run folder (+ server.log for serve:)
            summary.json           its repeats pooled, once they have run

The library's entry points; the CLI prints. A failing cell is recorded and the experiment goes
on; a stop (Ctrl-C) ends the current cell as it ends a run, marks it to be run again, saves the
state and raises ``ExperimentInterrupted``: ``resume`` then runs only what did not finish.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis.ranking import ConfigRuns, rank
from loadgen.errors import ConfigError, LoadgenError
from loadgen.experiment import cells as cells_mod
from loadgen.experiment import estimate
from loadgen.experiment.cell import CellInterrupted, profile_for, run_cell
from loadgen.experiment.spec import Experiment, load_experiment
from loadgen.experiment.state import DONE, FAILED, PENDING, RUNNING, State, digest, now
from loadgen.result import RunResult, load_summary
from loadgen.runner import repeats
from loadgen.summary.experiment import ExperimentFile

__all__ = ["ExperimentInterrupted", "ExperimentResult", "PlanLine", "plan", "resume", "run", "start"]

Status = Callable[[str], None]


class ExperimentInterrupted(LoadgenError):
    """Stopped by the user; ``--resume <folder>`` runs what did not finish."""


@dataclass(frozen=True)
class ExperimentResult:
    folder: Path
    state: ExperimentFile  # experiment.json

    @property
    def failed(self) -> list[str]:
        return [k for k, c in self.state["cells"].items() if c["state"] == FAILED]


@dataclass(frozen=True)
class PlanLine:
    order: int
    cell: cells_mod.Cell
    expected_s: float
    measured: bool  # expected_s is an earlier run's measured time of this configuration's cells


def plan(exp: Experiment, source: Path, earlier: estimate.Measured | None = None) -> list[PlanLine]:
    """The cells in the order they run, each with the time it is expected to take (the dry run;
    ``earlier``: an earlier run's measured times, ``estimate.earlier_run``); builds every cell's
    profile once, so a bad workload fails here, before any server starts."""
    out = []
    for i, cell in enumerate(cells_mod.cells(exp), 1):
        try:
            profile = profile_for(exp, source, cell.config, cell.repeat, Path("."), url="http://127.0.0.1:1")
        except ConfigError as err:
            raise ConfigError(
                [
                    f"the profile of {cell.config.label} ({err.source or 'defaults'} with this file's load, "
                    "sla and the backend's set:) is invalid:",
                    *err.problems,
                ],
                str(source),
                "experiment",
            ) from None
        seconds = estimate.cell_seconds(exp, profile, cell, earlier)
        out.append(PlanLine(i, cell, seconds, earlier is not None and cell.config.id in earlier.cell_s))
    return out


def start(exp: Experiment, source: Path, out: Path, experiment_id: str | None = None) -> State:
    """A new experiment folder with its plan saved (every cell pending)."""
    plan(exp, source)  # validates every cell's profile
    eid = experiment_id or f"{dt.datetime.now():%Y%m%d-%H%M%S}-{exp.name}"
    folder = out / eid
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise ConfigError(
            [f"{folder} already exists: resume it with --resume {folder}, or give --id"], what="experiment"
        ) from None
    return State.new(
        folder,
        source=source,
        name=exp.name,
        method=exp.load.method,
        plan=cells_mod.cells(exp),
        configs=cells_mod.configs(exp),
        sla=dict(exp.sla),
        attainment=exp.attainment,
        repeats=exp.repeats,
        seed=exp.seed,
    )


def resume(folder: Path, source: Path | None = None) -> tuple[Experiment, Path, State]:
    """An experiment folder's state and its experiment file (the one it was made from, unless
    ``source`` names another copy); refuses a file that changed since."""
    state = State.load(folder)
    src = Path(source or state.data["source"])
    exp = load_experiment(src)
    if digest(src) != state.data["source_sha256"]:
        raise ConfigError(
            [
                f"{src} changed since {folder.name} was planned: its cells would not be comparable; "
                "start a new experiment, or restore the file"
            ],
            what="experiment",
        )
    return exp, src, state


async def run(
    exp: Experiment,
    source: Path,
    state: State,
    *,
    api_key: str | None = None,
    stop: asyncio.Event | None = None,
    status: Status = lambda _m: None,
    on_done: Callable[[str], None] = lambda _cell_id: None,
) -> ExperimentResult:
    """Run every cell not yet done, then pool, rank and report; ``on_done`` is told each cell
    id once its state says done (the tracker logs it then)."""
    stop = stop or asyncio.Event()
    by_id = {c.id: c for c in cells_mod.cells(exp)}
    todo = state.todo()
    for k, cell_id in enumerate(todo, 1):
        cell = by_id[cell_id]
        entry = state.cell(cell_id)
        _set_aside(state, cell)
        state.update(cell_id, state=RUNNING, attempts=entry["attempts"] + 1, started_at=now(), error=None)
        status(f"cell {k} of {len(todo)}: {cell.config.label}, repeat {cell.repeat}")
        try:
            run_dir = await run_cell(
                exp, source, cell, state.folder, api_key=api_key, stop=stop, status=status
            )
        except CellInterrupted:
            state.update(cell_id, state=PENDING, ended_at=now(), error="interrupted: runs again on --resume")
            raise ExperimentInterrupted(
                f"stopped; `loadgen experiment --resume {state.folder}` goes on"
            ) from None
        except Exception as exc:  # noqa: BLE001 - a cell that fails, fails alone
            state.update(
                cell_id,
                state=FAILED,
                ended_at=now(),
                error=str(exc) or type(exc).__name__,
                run_dir=_rel(state, state.folder / cell.id),
            )
            status(f"cell {cell_id} failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            continue
        state.update(cell_id, state=DONE, ended_at=now(), run_dir=_rel(state, run_dir))
        on_done(cell_id)
    return finish(exp, source, state)


def finish(exp: Experiment, source: Path, state: State) -> ExperimentResult:
    """Pool each configuration's finished repeats, rank them, write the report."""
    from loadgen.report.experiment import write_experiment_report

    ranked = []
    for config in cells_mod.configs(exp):
        ranked.append(_config_runs(exp, source, state, config))
    state.data["ranking"] = rank([r for r in ranked if r is not None], exp.attainment, dict(exp.sla))
    state.data["complete"] = all(c["state"] == DONE for c in state.data["cells"].values())
    state.save()
    write_experiment_report(state.folder)
    return ExperimentResult(state.folder, state.data)


def _config_runs(exp: Experiment, source: Path, state: State, config: cells_mod.Config) -> ConfigRuns | None:
    b = config.backend
    if b.results is not None:
        return ConfigRuns(
            config.id,
            config.label,
            [_results(source, b.results)],
            config.gpu_hour_cost,
            config.gpus,
            1,
            (f"results read from {b.results}",),
        )
    done = []
    for r in range(1, exp.repeats + 1):
        entry = state.cell(f"{config.id}/repeat-{r}")
        if entry["state"] == DONE and entry["run_dir"] is not None:
            run_dir = state.folder / entry["run_dir"]
            done.append(RunResult(run_dir, load_summary(run_dir)))
    if not done:
        return ConfigRuns(
            config.id,
            config.label,
            [],
            config.gpu_hour_cost,
            config.gpus,
            exp.repeats,
            ("no repeat finished",),
        )
    prof = profile_for(exp, source, config, 1, state.folder, url="http://127.0.0.1:1")
    prof = prof.model_copy(update={"load": prof.load.model_copy(update={"repeats": exp.repeats})})
    repeats.pooled_summary(state.folder / config.id, prof, done, repeats.headline_figures)
    failed = exp.repeats - len(done)
    notes = (f"{failed} of {exp.repeats} repeats failed or did not run",) if failed else ()
    return ConfigRuns(
        config.id,
        config.label,
        [d.summary for d in done],
        config.gpu_hour_cost,
        config.gpus,
        exp.repeats,
        notes,
    )


def _results(source: Path, path: str) -> Any:
    """A ``results:`` backend's summary: a loadgen run folder, or another tool's result file."""
    from loadgen.analysis import peer_results

    p = Path(path) if Path(path).is_absolute() else source.parent / path
    peer = peer_results.read_peer_result(p)
    return load_summary(p) if peer is None else peer.summary


def _set_aside(state: State, cell: cells_mod.Cell) -> None:
    """A folder left by an earlier attempt of this cell (killed, or failed) is kept under
    another name, never overwritten: ``repeat-<r>.attempt-<k>``."""
    run_dir = state.folder / cell.id
    if not run_dir.exists():
        return
    k = 1
    while run_dir.with_name(f"{run_dir.name}.attempt-{k}").exists():
        k += 1
    run_dir.rename(run_dir.with_name(f"{run_dir.name}.attempt-{k}"))


def _rel(state: State, path: Path) -> str:
    return str(path.relative_to(state.folder))
