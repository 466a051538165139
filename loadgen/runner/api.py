"""Composition root: a validated profile in, a saved RunResult out.

    prepare  (prepare.py)    run folder, credentials and scrubber, transport, probe, workload,
                             specs fitted to the server, load shape and limits
    execute  (execute.py)    the load: driver + shape, records to requests.jsonl as they finish,
                             the server's /metrics alongside
    summarize (summarize.py) records and conditions -> summary.json

This module owns the order of things and nothing else: it never prints, exits, or reads the
environment (the caller hands in the API key and a stop event).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from loadgen.backends import registry
from loadgen.clock import run_loop
from loadgen.config import Profile, load_profile
from loadgen.config.stages import resolve_stages
from loadgen.errors import Interrupted, RunError
from loadgen.live.stats import LiveStats
from loadgen.redact import redact_url
from loadgen.result import REQUESTS, SUMMARY, RunResult
from loadgen.runner import repeats, selfcheck_store
from loadgen.runner.execute import Progress, execute
from loadgen.runner.fleet import resolve_workers
from loadgen.runner.plan import StagePlan
from loadgen.runner.prepare import make_run_dir, prepare, start_simulator, target_for
from loadgen.runner.reset import reset_server
from loadgen.runner.summarize import summarize
from loadgen.sim import answers, calibration
from loadgen.summary import ClientSelfcheck
from loadgen.workload import check_prompt_packages

T = TypeVar("T")

__all__ = ["Progress", "RunError", "run", "run_async"]


def run(
    profile: Profile | str | Path,
    *,
    api_key: str | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> RunResult:
    """Run ``profile`` to completion and save its results; see ``run_async``. Uses uvloop when
    it is installed (the client then spends less CPU per streamed token)."""
    return run_loop(run_async(profile, api_key=api_key, on_progress=on_progress))


async def run_async(
    profile: Profile | str | Path,
    *,
    api_key: str | None = None,
    stop: asyncio.Event | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_status: Callable[[str], None] | None = None,
    plan: StagePlan | None = None,
    watch: LiveStats | None = None,
) -> RunResult:
    """Run the profile's load against its target (or the built-in simulator when it names no
    URL); records stream to ``requests.jsonl`` as they finish and ``summary.json`` is written
    at the end, also when ``stop`` is set midway (in-flight requests are then cancelled; the
    summary says the run is incomplete). ``plan`` (default: the profile's stages) decides the
    stages as they go, e.g. the capacity search; the summary then describes the stages it ran.
    A profile with ``load.repeats`` > 1 runs that many times into one folder (``repeats``).
    ``watch``: a live view's figures (the dashboard's, the exporters'), fed every finished
    record, the stage and the server's latest scrape as the run goes."""
    if not isinstance(profile, Profile):
        profile = load_profile(profile)
    # A tokenizer without its package: one line, before the run folder exists.
    check_prompt_packages(profile.workload, profile.target.endpoint, profile.target.prompt_format)
    status = on_status or (lambda _msg: None)
    if profile.load.repeats > 1:

        async def one(p: Profile) -> RunResult:
            return await _run_once(p, api_key, stop, on_progress, status, plan, watch)

        return await repeats.run_repeated(profile, one, stop=stop, status=status)
    return await _run_once(profile, api_key, stop, on_progress, status, plan, watch)


async def _unless_stopped(work: Awaitable[T], stop: asyncio.Event | None, when: str) -> T:
    """``work``, or ``Interrupted`` as soon as ``stop`` is set. The probe, the prompt fit and
    the preflight wait on the server, up to ``target.timeout_s`` a request against one that
    stalls; a Ctrl-C or SIGTERM there stops them at once instead of waiting with them."""
    if stop is None:
        return await work
    task, stopped = asyncio.ensure_future(work), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the caller was cancelled: so is the work, not left behind
        task.cancel()
        raise
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        await asyncio.wait((task,))  # its own cleanup (the transport closed) runs to the end
        raise Interrupted(f"stopped {when}, before any load: nothing was measured")
    return task.result()


async def _run_once(
    profile: Profile,
    api_key: str | None,
    stop: asyncio.Event | None,
    on_progress: Callable[[Progress], None] | None,
    status: Callable[[str], None],
    plan: StagePlan | None,
    watch: LiveStats | None = None,
) -> RunResult:
    """One run of ``profile`` into a new run folder (``run_async`` without repeats)."""
    run_dir = make_run_dir(profile)
    with contextlib.ExitStack() as stack:
        url, sim_info = profile.target.url, None
        if url is None:
            sim, url = stack.enter_context(start_simulator(profile, run_dir))
            sim_info = {
                "config": sim.config.model_dump(mode="json"),
                "calibration": calibration.status(sim.config),
                "answers": answers.accuracy_model(sim.config),
            }
            status(f"built-in simulator {sim.config.preset} listening on {url}")
        target = target_for(profile, url, api_key, sim_info)
        if sim_info is not None:
            target.sim_http_url = sim.url
        if profile.load.until and (profile.client.ray or resolve_workers(profile.client.workers) > 1):
            raise RunError(
                "load.until (--until) is checked as records finish in one process: run it without "
                "client.workers / --workers and client.ray / --ray"
            )
        checked = None if sim_info is not None else selfcheck_against(profile)
        if checked is not None and checked["above_ceiling"]:
            status("warning: " + checked.get("message", ""))
        prepared = await _unless_stopped(
            prepare(profile, run_dir, target, status, checked), stop, "while the server was probed"
        )
        if profile.target.reset_path:  # after the preflight, whose prompt would stay cached
            try:
                await _unless_stopped(
                    reset_server(profile.target.transport, target, profile.target.reset_path),
                    stop,
                    "while the server was reset",
                )
            except BaseException:
                await prepared.aclose()
                raise
            status(f"reset: {', '.join(profile.target.reset_path)} answered")
        status(f"running {profile.name}: {redact_url(target.url)} {prepared.model}")
        if watch is not None and checked is not None:
            watch.context["selfcheck"] = checked
        executed = await execute(prepared, stop, on_progress, status, plan, watch)
        try:
            summary = summarize(prepared, executed)
        except OSError as exc:
            if not run_dir.is_dir():
                raise RunError(
                    f"the run folder {run_dir} was removed during the run; its records went with it"
                ) from None
            raise RunError(
                f"cannot write {run_dir / SUMMARY}: {exc.strerror or exc}; "
                f"{executed.records_saved} records were saved in {run_dir / REQUESTS}"
            ) from None
        if executed.sink_error is not None:
            raise RunError(
                f"the run stopped: {executed.sink_error}; {executed.records_saved} records "
                f"were saved before it, and {run_dir / SUMMARY} describes them"
            )
        return RunResult(run_dir, summary)
    raise AssertionError("unreachable")


def selfcheck_against(profile: Profile) -> ClientSelfcheck | None:
    """This run's highest load level beside the machine's saved self-check (``loadgen
    selfcheck``) for its transport, loop kind and number of worker processes; None when there
    is none (or the workers are Ray actors, which run on other machines, or the protocol
    brings its own transport, such as gRPC's, which the self-check, of the HTTP transports, did
    not measure)."""
    stages = resolve_stages(profile.load, profile.workload)
    if profile.client.ray or not stages or registry.backend(profile.target.endpoint).wire != "http":
        return None
    top = max(stages, key=lambda s: s.level)
    mode = "open" if top.rate is not None else "closed"
    workers = resolve_workers(profile.client.workers)
    saved = selfcheck_store.lookup(profile.target.transport, mode, workers)
    return selfcheck_store.judge(top.level, workers, saved)
