"""Prepare a run: everything decided before the first request goes out.

The run folder, the credentials and what must never be stored (the scrubber), the transport,
the protocol adapter and what its probe heard, the request specs (fitted to the server's
tokenizer where it can), the load shape and its limits. All of it lands in one ``Prepared``,
which ``execute`` runs and ``summarize`` describes; nothing here sends load.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import errno
import math
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from loadgen.backends import registry
from loadgen.backends.base import ProbeError, ProbeResult, StreamingBackend
from loadgen.backends.bodies import check as check_body
from loadgen.backends.stream import Live
from loadgen.backends.transports import Transport, TransportOptions
from loadgen.config import Profile
from loadgen.config.stages import Stage, resolve_stages
from loadgen.errors import RunError
from loadgen.redact import Scrubber
from loadgen.result import GROUND_TRUTH
from loadgen.runner.driver import Backend, SpecSource
from loadgen.runner.plan import connections
from loadgen.runner.preflight import Preflight, preflight
from loadgen.runner.replicas import Balanced, open_replicas
from loadgen.runner.replicas import balanced as balanced_over
from loadgen.server import fit
from loadgen.server.context import fit_context
from loadgen.summary import ClientSelfcheck
from loadgen.summary.conditions import ConditionsServerPreflight
from loadgen.workload import Workload, build_schedule

_NAME_IN_ID = 48  # characters of the profile name kept in a generated run id


@dataclass(slots=True)
class Target:
    """Where the load goes and what it carries: the URL without credentials, the headers sent
    (credentials included), and the scrubber that keeps those credentials out of every file."""

    url: str
    opts: TransportOptions
    scrubber: Scrubber
    sim_info: dict[str, Any] | None
    # The built-in simulator's HTTP address (its /dcgm/metrics), also when the run reaches it
    # over gRPC; None for a run against a URL.
    sim_http_url: str | None = None
    # target.urls: every replica's transport options, the first's being ``opts`` (empty: one URL).
    replicas: tuple[TransportOptions, ...] = ()

    @property
    def replica_urls(self) -> tuple[str, ...]:
        """Every replica's URL without its credentials (``url`` alone for one URL)."""
        return tuple(o.base_url for o in self.replicas) or (self.url,)


@dataclass(slots=True)
class Prepared:
    profile: Profile
    run_dir: Path
    target: Target
    transport: Transport
    backend: StreamingBackend
    live: Live
    model: str
    server: dict[str, Any]  # what the probe heard, plus the server's identity
    workload: Workload
    specs: SpecSource
    prompt_fit: dict[str, Any]
    stages: list[Stage]  # the profile's load levels (one for a single-stage run)
    total: int | None  # requests the run will send, when known in advance
    # The saved self-check beside this run's load (runner.selfcheck_store.judge): real targets only.
    selfcheck: ClientSelfcheck | None
    # target.urls: what the driver sends through (``backend`` is then its first replica's).
    balanced: Balanced | None = None

    @property
    def sender(self) -> Backend:
        """What the driver sends every request through: the balancer, or the one backend."""
        return self.balanced if self.balanced is not None else self.backend

    async def aclose(self) -> None:
        """Close the run's transports (every replica's)."""
        try:
            if self.balanced is not None:
                await self.balanced.aclose()
        finally:
            await self.transport.aclose()


def target_for(profile: Profile, url: str, api_key: str | None, sim_info: dict[str, Any] | None) -> Target:
    """The request headers and transport options for ``url`` (credentials moved out of it into
    the protocol's key header), and a scrubber that knows every secret value among them."""
    t = profile.target
    backend = registry.backend(t.endpoint)  # its own headers, and where its key goes
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "Accept-Encoding": "identity",
        **backend.HEADERS,
        **t.headers,
    }
    if api_key:
        headers.update(backend.auth_headers(api_key))
    load = profile.load
    # Closed loop or capped open loop: exactly as many connections as requests in flight (on
    # each replica: any one may hold them all). Uncapped open loop: no cap, or the pool would
    # silently queue (coordinated omission).
    cap = connections(resolve_stages(load, profile.workload), profile.workload)
    urls = t.replica_urls if len(t.replica_urls) > 1 else (url,)
    opts_list, secrets_seen = [], [api_key or ""]
    for each in urls:
        bare, userinfo = _split_credentials(each)
        if api_key and userinfo:
            raise RunError(
                "target.url carries user:password and target.api_key_env is set too; use one of them"
            )
        own = dict(headers)
        if userinfo:
            token = base64.b64encode(userinfo.encode()).decode()
            own["Authorization"] = "Basic " + token
            # Every form a server might echo: the header, its token, user:password, the password.
            secrets_seen += [own["Authorization"], token, userinfo, userinfo.partition(":")[2]]
        opts_list.append(
            TransportOptions(
                base_url=bare.rstrip("/"),
                headers=own,
                max_connections=cap,
                connect_timeout_s=t.connect_timeout_s,
                read_timeout_s=t.read_timeout_s,
                ca_bundle=t.ca_bundle,
                verify_tls=t.verify_tls,
            )
        )
    first = opts_list[0]
    scrubber = Scrubber(first.headers, extra=secrets_seen, secret_names=t.secret_headers)
    bare_url = _split_credentials(url)[0]
    replicas = tuple(opts_list) if len(opts_list) > 1 else ()
    return Target(bare_url, first, scrubber, sim_info, replicas=replicas)


async def prepare(
    profile: Profile,
    run_dir: Path,
    target: Target,
    status: Callable[[str], None],
    selfcheck: ClientSelfcheck | None = None,
) -> Prepared:
    """Probe the server, build the workload and the shape; the caller closes ``transport``.
    ``selfcheck``: the machine's saved ceiling beside this run's load, carried to the summary."""
    t, load = profile.target, profile.load
    backend_cls = registry.backend(t.endpoint)
    try:
        transport = backend_cls.open_transport(t.transport, target.opts)
    except ProbeError as exc:
        raise RunError(target.scrubber.scrub(str(exc))) from None
    others: list[Transport] = []  # the further replicas' transports (target.urls)
    try:
        workload = Workload(profile.workload, t.endpoint, t.prompt_format, profile.workload.prompt.tokenizer)
        live = Live()
        try:
            probe = await backend_cls.probe(transport, target.url, t.model)
            backend = backend_cls.for_target(t, probe.model, transport, live, token_counter(workload))
            await backend.ready()
        except ProbeError as exc:
            raise RunError(target.scrubber.scrub(str(exc))) from None
        others = await open_replicas(
            backend_cls, t.transport, target.replicas[1:], probe.model, target.scrubber.scrub
        )
        stages = resolve_stages(load, profile.workload)
        total = planned_total(stages)
        schedule = build_schedule(load, profile.workload) if profile.workload.trace else None
        if schedule is not None:  # a trace: as many requests as its window holds
            total = len(schedule)
        specs, prompt_fit = await fit.fit_for_profile(
            profile, transport, probe.model, workload, total, status, plausible_total(stages)
        )
        server = server_conditions(backend_cls, probe)
        # A session's turns are built from their history as the run goes: none to check ahead.
        ahead = total if workload.sessions is None else None
        specs, server["identity"] = fit_context(probe.identity, specs, ahead, t.context_overflow)
        if backend.custom is not None:  # the run's own first request, rendered before any is sent
            first = workload.single(0) if workload.sessions is not None else specs.request(0)
            check_body(backend.payload(first), f"{backend.custom.name} (request 0)", False)
        profile, backend, server["preflight"] = await _preflight(
            profile, target, transport, probe, backend, workload, specs, status
        )
        balanced = None
        if others:
            t = profile.target  # ignore_eos as the preflight resolved it
            counter = token_counter(workload)
            balanced = balanced_over(
                t.balance,
                backend,
                others,
                lambda tr: backend_cls.for_target(t, probe.model, tr, live, counter),
                (t.eject_after, t.eject_s),
            )
            await balanced.ready()
    except BaseException:
        for other in others:
            await other.aclose()
        await transport.aclose()
        raise
    return Prepared(
        profile,
        run_dir,
        target,
        transport,
        backend,
        live,
        probe.model,
        server,
        workload,
        specs,
        prompt_fit,
        stages,
        total,
        selfcheck,
        balanced,
    )


async def _preflight(
    profile: Profile,
    target: Target,
    transport: Transport,
    probe: ProbeResult,
    backend: StreamingBackend,
    workload: Workload,
    specs: SpecSource,
    status: Callable[[str], None],
) -> tuple[Profile, StreamingBackend, ConditionsServerPreflight]:
    """The preflight request (``preflight.py``) and what the run goes on with: its profile
    (``target.ignore_eos`` resolved to what is sent: auto becomes true, or false when the server
    refused the field), its backend (``backend``, built to send what auto sends, unless the
    field was dropped), and the outcome for ``conditions.server.preflight``. The preflight's own
    backends count into a ``Live`` of their own, so the run's progress never shows it. The
    built-in simulator takes every body loadgen builds and logs each request in its ground
    truth, so it gets none; nor does a run with ``target.preflight: false``."""
    t = profile.target
    backend_cls = registry.backend(t.endpoint)
    counter = token_counter(workload)

    async def make(ignore_eos: bool, live: Live | None = None) -> StreamingBackend:
        target_t = t.model_copy(update={"ignore_eos": ignore_eos})
        made = backend_cls.for_target(target_t, probe.model, transport, live or Live(), counter)
        await made.ready()
        return made

    outcome = Preflight(sent=False)
    if t.preflight and target.sim_info is None:
        first = workload.single(0) if workload.sessions is not None else specs.request(0)
        outcome = await preflight(make, first, t.ignore_eos, target.scrubber, status)
    ignore_eos = t.ignore_eos is not False and "ignore_eos" not in outcome.dropped
    if ignore_eos != t.ignore_eos:
        profile = profile.model_copy(update={"target": t.model_copy(update={"ignore_eos": ignore_eos})})
    if not ignore_eos and t.ignore_eos is not False:  # dropped: the run's backend would send it
        backend = await make(False, backend.live)
    return profile, backend, outcome.conditions()


def server_conditions(backend_cls: type[StreamingBackend], probe: ProbeResult) -> dict[str, Any]:
    """``conditions.server``: what the probe heard, and where each answer it kept was heard
    (``sources``), so a saved run renders without asking the live protocol registry (which may
    have changed since) what its probe reads."""
    return {**probe.info, "sources": [list(pair) for pair in backend_cls.SOURCES]}


def planned_total(stages: list[Stage]) -> int | None:
    """Requests the stages will send, when every stage has a count (None otherwise)."""
    counts = [None if s.num_requests is None else s.num_requests + s.warmup_requests for s in stages]
    return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


def plausible_total(stages: list[Stage]) -> int | None:
    """Requests the stages can plausibly send, when every stage bounds it: a count, or an
    open-loop rate over a duration (its Poisson count's mean plus five standard deviations).
    A duration-bounded closed loop sends as fast as the server answers: None."""
    n = 0
    for s in stages:
        if s.num_requests is not None:
            n += s.num_requests + s.warmup_requests
        elif s.rate is not None and s.duration_s is not None:
            mean = s.rate * s.duration_s
            n += math.ceil(mean + 5 * math.sqrt(mean)) + 1 + s.warmup_requests
        else:
            return None
    return n


def make_run_dir(profile: Profile) -> Path:
    """A new folder for the run under ``output.dir``; a clear RunError when it cannot be made
    (the id is taken, the parent is a file, the folder is read-only or not a real one)."""
    out = Path(profile.output.dir)
    run_id = profile.output.run_id
    if run_id is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", profile.name).strip("-.")[:_NAME_IN_ID] or "run"
        run_id = f"{stamp}-{name}-{secrets.token_hex(2)}"
    run_dir = out / run_id
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise RunError(
            f"{run_dir} already exists: give another output.run_id (--run-id) or remove that folder"
        ) from None
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):
            why = "a file stands where a folder is needed"
        raise RunError(
            f"cannot create the run folder {run_dir}: {why}; choose another output.dir (--out)"
        ) from None
    return run_dir


@contextlib.contextmanager
def start_simulator(profile: Profile, run_dir: Path) -> Iterator[tuple[Any, str]]:
    """The built-in simulator in its own process, for a profile that names no URL, and the URL
    the run's protocol reaches it at: its gRPC frontend for a protocol of ``wire`` "grpc"."""
    from loadgen.sim import SimConfig, SimConfigError, SimProcess

    try:
        config = SimConfig.from_dict(dict(profile.sim))
    except SimConfigError as exc:
        raise RunError(str(exc)) from None
    grpc = registry.backend(profile.target.endpoint).wire == "grpc"
    with SimProcess(config, ground_truth_path=run_dir / GROUND_TRUTH, grpc_port=0 if grpc else None) as sim:
        url = sim.grpc_url if grpc else sim.url
        assert url is not None  # the child announced the URL it listens on
        yield sim, url


def token_counter(workload: Workload) -> Callable[[str], int] | None:
    tok = workload.tokenizer
    if tok is None:
        return None
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def _split_credentials(url: str) -> tuple[str, str | None]:
    """``http://user:pw@host`` -> (``http://host``, ``user:pw``) for a Basic header."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), unquote(userinfo)
