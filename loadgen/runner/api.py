"""Composition root: a validated profile in, a saved RunResult out.

    profile -> workload + schedule -> driver(backend over one shared transport) -> records
            -> requests.jsonl (as they finish) -> metrics -> summary.json

This module owns the order of things and nothing else: it never prints, exits, or reads the
environment (the caller hands in the API key and a stop event).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from loadgen.analysis import metrics
from loadgen.runner import conditions as metadata, health as client_health
from loadgen.server import fit, identity
from loadgen.backends.base import Live, ProbeError
from loadgen.errors import RunError
from loadgen.redact import redact_profile, redact_url
from loadgen.backends import registry
from loadgen.backends.transports import TransportOptions, make_transport
from loadgen.clock import now_ns
from loadgen.runner.driver import Limits, drive
from loadgen.runner.shapes import ClosedLoop, LoadShape, OpenLoop
from loadgen.config import Profile, load_profile
from loadgen.records import JsonlSink
from loadgen.result import GROUND_TRUTH, REQUESTS, SCHEMA_VERSION, RunResult, write_summary
from loadgen.server.scraper import ServerMetricsScraper, attach as attach_server_metrics
from loadgen.workload import Workload, build_schedule

_PROGRESS_EVERY_S = 0.25


@dataclass(slots=True)
class Progress:
    """What a progress display needs, handed to ``on_progress`` a few times a second."""

    total: int | None
    duration_s: float | None
    elapsed_s: float
    live: Live


def run(profile: Profile | str | Path, *, api_key: str | None = None,
        on_progress: Callable[[Progress], None] | None = None) -> RunResult:
    """Run ``profile`` to completion and save its results; see ``run_async``. Uses uvloop when
    it is installed (the client then spends less CPU per streamed token)."""
    coro = run_async(profile, api_key=api_key, on_progress=on_progress)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


async def run_async(profile: Profile | str | Path, *, api_key: str | None = None,
                    stop: asyncio.Event | None = None,
                    on_progress: Callable[[Progress], None] | None = None,
                    on_status: Callable[[str], None] | None = None) -> RunResult:
    """Run the profile's load against its target (or the built-in simulator when it names no
    URL); records stream to ``requests.jsonl`` as they finish and ``summary.json`` is written
    at the end, also when ``stop`` is set midway (in-flight requests are then cancelled)."""
    if not isinstance(profile, Profile):
        profile = load_profile(profile)
    status = on_status or (lambda _msg: None)
    run_dir = _make_run_dir(profile)
    with contextlib.ExitStack() as stack:
        url = profile.target.url
        sim_info = None
        if url is None:
            sim = stack.enter_context(_start_simulator(profile, run_dir))
            url, sim_info = sim.url, {"config": sim.config.model_dump(mode="json")}
            status(f"built-in simulator {sim.config.preset} listening on {url}")
        return await _run_against(profile, url, api_key, run_dir, sim_info, stop, on_progress, status)
    raise AssertionError("unreachable")


async def _run_against(profile: Profile, url: str, api_key: str | None, run_dir: Path,
                       sim_info: dict | None, stop: asyncio.Event | None,
                       on_progress: Callable[[Progress], None] | None,
                       status: Callable[[str], None]) -> RunResult:
    t = profile.target
    load = profile.load
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
               "Accept-Encoding": "identity", **t.headers}
    url, basic = _split_credentials(url)
    if api_key and basic:
        raise RunError("target.url carries user:password and target.api_key_env is set too; "
                       "use one of them")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    elif basic:
        headers["Authorization"] = f"Basic {basic}"
    slots = load.concurrency or load.max_concurrency
    transport = make_transport(t.transport, TransportOptions(
        base_url=url.rstrip("/"), headers=headers,
        # Closed loop or capped open loop: exactly as many connections as requests in flight.
        # Uncapped open loop: no cap, or the pool would silently queue (coordinated omission).
        max_connections=slots,
        connect_timeout_s=t.connect_timeout_s, read_timeout_s=t.read_timeout_s))
    scraper = None
    try:
        backend_cls = registry.backend(t.endpoint)
        try:
            probe = await backend_cls.probe(transport, url, t.model)
        except ProbeError as exc:
            raise RunError(str(exc)) from None
        server, model = probe.info, probe.model
        workload = Workload(profile.workload, t.endpoint, t.prompt_format, profile.workload.prompt.tokenizer)
        schedule = build_schedule(load, profile.workload)
        live = Live()
        backend = backend_cls.for_target(t, model, transport, live, _token_counter(workload))
        shape: LoadShape = (ClosedLoop(load.concurrency) if load.concurrency is not None
                            else OpenLoop(schedule, load.max_concurrency))
        limits = Limits(num_requests=profile.workload.num_requests,
                        duration_s=profile.workload.duration_s, warmup_requests=load.warmup_requests)
        total = None if profile.workload.num_requests is None else \
            profile.workload.num_requests + load.warmup_requests
        if schedule is not None:
            total = len(schedule) if total is None else min(total, len(schedule))
        specs, prompt_fit = await fit.fit_for_profile(profile, transport, model, workload, total, status)
        server["identity"] = identity.identity(probe.identity, specs, total)
        # Its own connection, so a scrape never takes a request's slot; first scrape before the load.
        scraper = await ServerMetricsScraper.open(
            profile.server_metrics, t.transport, url,
            {k: v for k, v in headers.items() if k not in ("Content-Type", "Accept", "Accept-Encoding")},
            t.connect_timeout_s)
        started_at = dt.datetime.now(dt.timezone.utc)
        cpu0 = time.process_time()
        status(f"running {profile.name}: {redact_url(url)} {model}")
        with JsonlSink(run_dir / REQUESTS) as sink:
            result_t0 = now_ns()
            ticker = _start_ticker(on_progress, total, profile.workload.duration_s, live)
            # A full collection walks every object of the process (modules, pandas, numpy...)
            # and stalled the loop for ~50 ms mid-run; frozen, the old objects are skipped and
            # only what the run allocates is ever scanned.
            gc.collect()
            gc.freeze()
            try:
                result = await drive(specs, backend, shape, limits, on_record=sink.write, stop=stop)
            finally:
                gc.unfreeze()
                if ticker is not None:
                    ticker.cancel()
                    on_progress(Progress(total, profile.workload.duration_s,
                                         (now_ns() - result_t0) / 1e9, live))
        cpu_s = time.process_time() - cpu0
        ended_at = dt.datetime.now(dt.timezone.utc)
        server_series = await scraper.stop(expected_requests=sum(1 for r in result.records if r.ok))
    finally:
        if scraper is not None:
            await scraper.aclose()
        await transport.aclose()

    records = result.records
    summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_dir.name,
        "started_at": started_at.isoformat(),
        "ended_at": ended_at.isoformat(),
        "interrupted": result.interrupted,
        "conditions": _conditions(profile, url, model, server, workload, records, sim_info),
    }
    summary["conditions"]["prompt_lengths"] = prompt_fit
    if prompt_fit["method"] == "server /tokenize" and prompt_fit["exact"] == prompt_fit["requests_fitted"]:
        summary["conditions"]["prompt_lengths_approximate"] = False
    summary.update(metrics.summarize(records, sla=profile.sla))
    summary["client"] = client_health.assess(result, cpu_s, records, capped=bool(load.max_concurrency))
    attach_server_metrics(summary, run_dir, server_series, records)
    write_summary(run_dir, summary)
    return RunResult(run_dir, summary, records)


def _conditions(profile: Profile, url: str, model: str, server: dict, workload: Workload,
                records: list, sim_info: dict | None) -> dict:
    t = profile.target
    measured = [r.id for r in records if not r.warmup]
    return {
        "target": {"url": redact_url(url), "endpoint": t.endpoint, "model": model,
                   "transport": t.transport, "builtin_simulator": sim_info},
        "server": server,
        "profile": redact_profile(profile.resolved()),
        "seed": profile.workload.seed,
        "load": profile.resolved()["load"],
        "lengths": {"requested": {"input_tokens": profile.resolved()["workload"]["input_tokens"],
                                  "output_tokens": profile.resolved()["workload"]["output_tokens"]},
                    "realised": _realised(workload, records, measured)},
        "prompt_lengths_approximate": workload.approximate_prompt_lengths,
        "client": metadata.client_info(t.transport, type(asyncio.get_running_loop()).__module__),
        "host": metadata.host_info(),
        "labels": dict(profile.labels),
    }


def _realised(workload: Workload, records: list, measured: list[int]) -> dict:
    """Lengths as sampled by the workload, and as the server reported them."""
    from loadgen.workload.lengths import describe

    ok = [r for r in records if r.ok and not r.warmup]
    return {
        "sampled": workload.realised(measured),
        "server_prompt_tokens": describe([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
        "server_output_tokens": describe([r.output_tokens for r in ok if r.output_tokens is not None]),
        "output_tokens_short_of_requested": sum(
            1 for r in ok if r.output_tokens is not None and r.output_tokens < r.requested_output_tokens),
    }


def _token_counter(workload: Workload) -> Callable[[str], int] | None:
    tok = getattr(workload, "tokenizer", None)
    if tok is None:
        return None
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def _start_ticker(on_progress: Callable[[Progress], None] | None, total: int | None,
                  duration_s: float | None, live: Live) -> asyncio.Task | None:
    if on_progress is None:
        return None
    t0 = now_ns()

    async def tick() -> None:
        while True:
            on_progress(Progress(total, duration_s, (now_ns() - t0) / 1e9, live))
            await asyncio.sleep(_PROGRESS_EVERY_S)

    return asyncio.create_task(tick())


def _split_credentials(url: str) -> tuple[str, str | None]:
    """``http://user:pw@host`` -> (``http://host``, base64 of ``user:pw``) for a Basic header."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    token = base64.b64encode(unquote(userinfo).encode()).decode()
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), token


def _make_run_dir(profile: Profile) -> Path:
    out = Path(profile.output.dir)
    run_id = profile.output.run_id
    if run_id is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", profile.name).strip("-") or "run"
        run_id = f"{stamp}-{name}-{secrets.token_hex(2)}"
    run_dir = out / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


@contextlib.contextmanager
def _start_simulator(profile: Profile, run_dir: Path) -> Any:
    try:
        from loadgen.sim import SimConfig, SimConfigError, SimProcess
    except ImportError as exc:  # pragma: no cover - the simulator ships with loadgen
        raise RunError(f"the built-in simulator is unavailable ({exc}); give target.url") from None
    try:
        config = SimConfig.from_dict(dict(profile.sim))
    except SimConfigError as exc:
        raise RunError(str(exc)) from None
    with SimProcess(config, ground_truth_path=run_dir / GROUND_TRUTH) as sim:
        yield sim
