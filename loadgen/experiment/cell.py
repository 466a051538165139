"""One cell: its profile, its server (for ``serve:``), its reset hooks, its run.

A cell's profile is the experiment's workload with the cell's load method, the experiment's
SLOs, round r's seed, the backend's target and labels (``backend``, each matrix value, the GPU
price and count the cost figures read, and for a ``serve:`` backend its scrubbed command line
and version), written to ``<experiment>/<config>/repeat-<r>/`` like any run.

What fails a cell, and only that cell: a server that does not start or is not ready in time,
one that exits during the cell (the run is stopped at once: its numbers would describe a dead
server), a reset hook that does not answer 2xx, a run that cannot start. The failure is the
cell's ``error`` in experiment.json, ending with the last lines of the server's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from pathlib import Path
from typing import Any

from loadgen import metric_defs
from loadgen.analysis.sla import nothing_served
from loadgen.config import Profile, load_profile
from loadgen.config.shipped import resolve_profile
from loadgen.errors import LoadgenError
from loadgen.experiment.cells import Cell, Config
from loadgen.experiment.serve import Server, ServerError, free_port, secret_values
from loadgen.experiment.spec import Experiment
from loadgen.redact import Scrubber
from loadgen.result import RunResult
from loadgen.runner import api, capacity

__all__ = ["CellFailed", "CellInterrupted", "profile_for", "run_cell", "workload_path"]

SERVER_LOG = "server.log"
WATCH_S = 0.5


class CellInterrupted(Exception):
    """The user stopped the experiment during this cell (Ctrl-C, SIGTERM)."""


class CellFailed(LoadgenError):
    """The cell failed; the message (scrubbed of the backend's secrets) says why."""


def workload_path(exp: Experiment, source: Path) -> Path | None:
    """The experiment's profile: a path beside the experiment file, or a shipped profile's name."""
    if exp.profile is None:
        return None
    beside = source.parent / exp.profile
    return beside if beside.exists() else resolve_profile(exp.profile)


def profile_for(
    exp: Experiment,
    source: Path,
    config: Config,
    repeat: int,
    folder: Path,
    url: str | None = None,
    extra_labels: dict[str, str] | None = None,
) -> Profile:
    """The cell's profile (see the module's docstring)."""
    ov: dict[str, Any] = {**exp.set, **config.overrides}
    ov.update(
        {
            "workload.seed": exp.seed + repeat - 1,
            "output.dir": str(folder / config.id),
            "output.run_id": f"repeat-{repeat}",
            "output.progress": False,
            "load.repeats": 1,
        }
    )
    for slo in metric_defs.SLOS:
        ov[f"sla.{slo}"] = exp.sla.get(slo)
    load = exp.load
    if load.sweep is not None:
        ov.update({"load.sweep": load.sweep, "load.stages": [], "load.concurrency": None, "load.rate": None})
    elif load.stages is not None:
        ov.update(
            {"load.stages": load.stages, "load.sweep": None, "load.concurrency": None, "load.rate": None}
        )
    else:  # the search sets every stage; a nominal rate and length make the profile valid
        cap = load.capacity
        assert cap is not None  # ExperimentLoad: exactly one
        ov.update(
            {
                "load.stages": [],
                "load.sweep": None,
                "load.concurrency": None,
                "load.rate": cap.start_rate or 1.0,
                "load.max_concurrency": None,
            }
        )
        ov.setdefault("workload.duration_s", 60.0)
        ov.setdefault("workload.num_requests", None)
    b = config.backend
    if config.sim is not None:
        sim = dict(config.sim)
        if isinstance(sim.get("preset_file"), str):  # beside the experiment file, as a profile's paths
            sim["preset_file"] = str(source.parent / Path(sim["preset_file"]).expanduser())
        ov.update({"target.url": None, "sim": sim})
    else:
        ov["target.url"] = url
    if b.model is not None:
        ov["target.model"] = config.filled(b.model)
    if b.reset:  # the run's own reset hooks: before the load, with the run's headers
        ov["target.reset_path"] = b.reset
    labels = {**config.labels, "experiment": exp.name, **(extra_labels or {})}
    if config.gpu_hour_cost is not None:
        labels.update(gpu_hour_cost=f"{config.gpu_hour_cost:g}", gpu_count=f"{config.gpus:g}")
    ov.update({f"labels.{k}": str(v) for k, v in labels.items()})
    return load_profile(workload_path(exp, source), overrides=ov)


async def run_cell(
    exp: Experiment,
    source: Path,
    cell: Cell,
    folder: Path,
    *,
    api_key: str | None,
    stop: asyncio.Event,
    status: Any,
) -> Path:
    """Run ``cell`` into ``folder/<config>/repeat-<r>`` and return that folder; raises
    ``LoadgenError`` (the cell failed: its message says why) or ``CellInterrupted``."""
    config, b = cell.config, cell.config.backend
    base = folder / config.id
    base.mkdir(parents=True, exist_ok=True)
    run_dir = base / f"repeat-{cell.repeat}"
    log = base / f"repeat-{cell.repeat}.{SERVER_LOG}"
    server: Server | None = None
    scrubber = _scrubber(config, api_key)
    try:
        with contextlib.ExitStack() as stack:
            url, extra = (config.filled(b.url) if b.url else None), {}
            if b.serve is not None:
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                server = Server(
                    config.filled(b.serve, port),
                    log,
                    url=url,
                    env={k: config.filled(v, port) for k, v in b.env.items()},
                    ready=b.ready,
                    ready_timeout_s=b.ready_timeout_s,
                    stop_grace_s=b.stop_grace_s,
                    cancelled=stop.is_set,
                )
                status(f"{cell.id}: starting {server.command}")
                await asyncio.to_thread(server.__enter__)
                stack.callback(server.stop)
                extra = {"serve_command": server.command, "server_version": server.version or "unknown"}
            profile = profile_for(exp, source, config, cell.repeat, folder, url, extra)
            res = await _watched_run(exp, profile, server, api_key, stop, status)
    except Exception as exc:  # noqa: BLE001 - whatever failed, fails this cell alone (scrubbed)
        if stop.is_set():  # a server start or a reset cut short by the user
            raise CellInterrupted(cell.id) from None
        failed: Exception | None = exc
    else:
        failed = None
    finally:
        kept = _keep_log(log, run_dir, scrubber)
        if server is not None and kept is not None:
            server.log_path = kept  # where the error's log tail is read from, and named
    if failed is None and stop.is_set():
        raise CellInterrupted(cell.id)
    if failed is None and server is not None and server.died is not None:
        failed = ServerError(f"the server exited with code {server.died} during the cell", server)
    if failed is None and not res.summary.get("complete", True):
        failed = LoadgenError(f"the run did not complete: {res.summary.get('incomplete_reason')}")
    if failed is None and (why := nothing_served(res.summary)) is not None:
        # Its figures are of refusals: ranked, two such cells would tie as "no capacity".
        failed = LoadgenError(why)
    if failed is not None:
        raise CellFailed(scrubber.scrub(str(failed) or type(failed).__name__)) from None
    return res.run_dir


def _scrubber(config: Config, api_key: str | None) -> Scrubber:
    """What a failure message or a server's log must not show: the API key, the values of the
    backend's secret-looking environment variables, and of its command's secret options."""
    b = config.backend
    argv = shlex.split(config.filled(b.serve, 0)) if b.serve else []
    return Scrubber(headers=b.env, extra=[api_key or "", *secret_values(argv)])


async def _watched_run(
    exp: Experiment,
    profile: Profile,
    server: Server | None,
    api_key: str | None,
    stop: asyncio.Event,
    status: Any,
) -> RunResult:
    """The cell's run, stopped at once when the user stops or the server exits."""
    cell_stop = asyncio.Event()

    async def watch() -> None:
        while not cell_stop.is_set():
            if stop.is_set() or (server is not None and server.exit_code() is not None):
                if server is not None and server.exit_code() is not None:
                    server.died = server.exit_code()
                cell_stop.set()
                return
            await asyncio.sleep(WATCH_S)

    watcher = asyncio.create_task(watch())
    try:
        cap = exp.load.capacity
        if cap is None:
            return await api.run_async(profile, api_key=api_key, stop=cell_stop, on_status=status)
        found = await capacity.run_capacity(
            profile,
            attainment=exp.attainment,
            slos=dict(exp.sla),
            start_rate=cap.start_rate,
            stage_s=cap.stage_duration_s,
            warmup_s=cap.warmup_s,
            precision=cap.precision,
            max_stages=cap.max_stages,
            max_rate=cap.max_rate,
            budget_s=cap.budget_s,
            confirm_s=cap.confirm_s,
            twin=cap.twin,
            api_key=api_key,
            stop=cell_stop,
            on_status=status,
        )
        return RunResult(found.run_dir, found.summary)
    finally:
        cell_stop.set()
        await watcher


def _keep_log(log: Path, run_dir: Path, scrubber: Scrubber) -> Path | None:
    """The server's log moved into the cell's run folder (made for it when the run never
    started), scrubbed of the backend's secrets (a server may print its arguments); its new path."""
    if not log.exists():
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    kept = log.replace(run_dir / SERVER_LOG)
    if scrubber.active:
        kept.write_text(scrubber.scrub(kept.read_text(errors="replace")))
    return kept
