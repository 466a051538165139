"""``--ray``: the run's workers as Ray actors, on a real two-node Ray cluster on this machine.

The module starts its own cluster (a head and a second node, 2 CPUs each, in a temp dir of
their own) and stops exactly that cluster afterwards: not with ``ray stop``, which would stop
every Ray cluster on the machine, a developer's own included, but by ending the processes
that run from this cluster's temp dir. One run of 40 requests over two actors is checked
against the scripted server's own log, like the engine tests check a one-process run: the
Ray path must not cost the timing its accuracy, and its records must be on the driver's clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen import load_run
from loadgen.errors import RunError
from loadgen.runner import api
from loadgen.testing import StreamServer

import helpers
from helpers import assert_percentiles, assert_within

pytest.importorskip("ray", reason="Ray is not installed: pip install 'loadgen[ray]' (CI installs it)")
# Serial: a two-node cluster, its actors, the scripted server and the client share 2 cores; beside
# another xdist worker, the worst TTFT excess over the server's log measured the neighbour (18 ms).
pytestmark = pytest.mark.serial

MS = 1e6
_HEALTH = {"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}
N = 40
WARMUP = 4  # each worker's first request on each of its 2 new connections: TTFT includes the connect


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_cli(*args: str, env: dict[str, str]) -> None:
    cmd = [sys.executable, "-c", "from ray.scripts.scripts import main; main()", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"ray {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(entry.name)] = (ppid, cmdline)
    return out


def _with_descendants(roots: set[int], procs: dict[int, tuple[int, str]]) -> set[int]:
    pids = set(roots)
    while more := {pid for pid, (ppid, _) in procs.items() if ppid in pids} - pids:
        pids |= more
    return pids


def _pids_of(temp_dir: str) -> set[int]:
    """The cluster's processes: every one whose command line names its temp dir (GCS, raylets,
    the monitors and the dashboard do) and everything they started (agents, actors)."""
    procs = _processes()
    pids = _with_descendants({pid for pid, (_, cmd) in procs.items() if temp_dir in cmd}, procs)
    pids.discard(os.getpid())
    return pids


def _stop_cluster(temp_dir: str) -> None:
    """What ``ray stop --force`` does (SIGKILL: the GCS ignores SIGTERM), to this cluster only."""
    deadline = time.monotonic() + 10.0
    while (pids := _pids_of(temp_dir)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    left = _pids_of(temp_dir)
    assert not left, f"Ray processes left behind: {sorted(left)}"


def _ray_daemons_of_this_process() -> list[str]:
    """Ray daemons this test process started: a Ray call made after a run's connection ended
    starts a local cluster as the driver's children (the module's own cluster is started by
    ``ray start``, whose daemons are not)."""
    procs = _processes()
    mine = _with_descendants({os.getpid()}, procs) - {os.getpid()}
    return [procs[pid][1][:120] for pid in mine if any(d in procs[pid][1] for d in ("gcs_server", "/raylet"))]


@dataclass
class Cluster:
    address: str  # the head's GCS, host:port
    second_raylet: int  # the pid of the second node's raylet: killing it loses that node
    second_node_id: str


def _raylets(temp_dir: str) -> dict[int, str]:
    """This cluster's raylets: pid -> node id (from the raylet's own command line)."""
    out = {}
    for pid in _pids_of(temp_dir):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv and argv[0].endswith("/raylet"):
            out[pid] = next((a.split("=", 1)[1] for a in argv if a.startswith("--node_id=")), "")
    return out


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Cluster]:
    """A head and a second node on 127.0.0.1 (2 CPUs each). The head notices a lost node
    after 3 missed health checks 0.5 s apart, not Ray's default 5 x 3 s."""
    temp_dir = tempfile.mkdtemp(prefix="lgr", dir="/tmp")  # short: socket paths max 107 bytes
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # Ray 2.5x turns token auth on for a head when ~/.ray/auth_token exists (any ray.init() of a
    # local cluster writes one); this loopback-only cluster is the test's own, without it.
    env["RAY_AUTH_MODE"] = "disabled"
    small = ("--object-store-memory", str(100 << 20))  # Ray's floor is 75 MB; the default is 30% of RAM
    t0 = time.monotonic()
    try:
        _ray_cli(
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            f"--dashboard-port={_free_port()}",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
            "--system-config=" + json.dumps(_HEALTH),
            *small,
            env=env,
        )
        head = _raylets(temp_dir)
        second = ("start", f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=2")
        _ray_cli(*second, *small, env=env)
        print(f"two-node Ray cluster started in {time.monotonic() - t0:.1f} s")
        ((pid, node_id),) = (item for item in _raylets(temp_dir).items() if item[0] not in head)
        # The driver (this process) too: no RAY_ADDRESS to override the one the tests give,
        # and the cluster's auth mode.
        saved = {name: os.environ.get(name) for name in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
        os.environ.pop("RAY_ADDRESS", None)
        os.environ["RAY_AUTH_MODE"] = "disabled"
        try:
            yield Cluster(f"127.0.0.1:{port}", pid, node_id)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    finally:
        _stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def fast_server() -> Iterator[StreamServer]:
    with StreamServer(ttft_ms=5, itl_ms=2) as s:
        yield s


@pytest.fixture(scope="module")
def ray_run(ray_cluster: Cluster, fast_server: StreamServer, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One closed-loop run (concurrency 4, 4 warm-up and 40 measured requests) over two actors,
    and the server's log."""
    fast_server.clear_log()
    profile = helpers.profile(
        tmp_path_factory.mktemp("ray"),
        fast_server.url,
        **{
            "workload.num_requests": N,
            "load.concurrency": 4,
            "load.warmup_requests": WARMUP,
            "workload.output_tokens": 6,
            "client.ray": ray_cluster.address,
            "client.workers": 2,
        },
    )
    t0 = time.monotonic()
    res = api.run(profile)
    print(f"the Ray run took {time.monotonic() - t0:.1f} s (connect, 2 actors, 40 requests, close)")
    import ray

    assert not ray.is_initialized(), "the run left its Ray connection open"
    assert _ray_daemons_of_this_process() == []
    return res, fast_server.log()


def test_every_request_once_across_both_workers(ray_run: Any) -> None:
    res, _ = ray_run
    assert res.summary["counts"]["ok"] == N
    assert res.summary["complete"] is True, res.summary["incomplete_reason"]
    lines = [json.loads(x) for x in (res.run_dir / "requests.jsonl").read_text().splitlines()]
    assert sorted(rec["id"] for rec in lines) == list(range(N + WARMUP))
    assert {rec["worker"] for rec in lines} == {0, 1}
    assert all(rec["ok"] for rec in lines)


def test_each_worker_names_its_ray_node(ray_run: Any) -> None:
    res, _ = ray_run
    assert res.summary["conditions"]["client"]["placement"] == "ray"
    workers = res.summary["client"]["workers"]
    assert [w["worker"] for w in workers] == [0, 1]
    nodes = set()
    for w in workers:
        # Ray names a node by the address it registered (here this host's own, not loopback).
        where = re.fullmatch(r"ray node (\S+) \(([0-9a-f]{8})\) actor (\d)", w["where"])
        assert where is not None, w["where"]
        assert int(where[3]) == w["worker"]
        assert w["lost"] is None
        nodes.add(where[2])
    # SPREAD with a free CPU on each node: one actor per node.
    assert len(nodes) == 2, workers


@pytest.mark.timing_absolute
def test_records_are_on_the_drivers_clock(ray_run: Any) -> None:
    """Same machine, one CLOCK_MONOTONIC: no shift is applied, and each first token is stamped
    after the server sent it and soon after (an actor on a clock of its own would be far off)."""
    res, log = ray_run
    for w in res.summary["client"]["workers"]:
        assert w["clock"]["same_clock"] is True
        assert w["clock"]["shift_applied_ns"] == 0
        assert abs(w["clock"]["offset_ns"]) <= w["clock"]["error_bound_ns"] + 1_000_000
    df = load_run(res.run_dir)
    trail = np.array(
        [(t - log[rid]["first_token_ns"]) / MS for rid, t in zip(df["response_id"], df["t_first_token_ns"])]
    )
    assert trail.min() >= 0.0
    assert_percentiles(trail, "Ray actor: first-token trail", p50=2.0)


@pytest.mark.timing_absolute
def test_ttft_matches_the_servers_log(ray_run: Any) -> None:
    """The client's TTFT exceeds the server's own by the request's trip, never less, under 2 ms
    at the median (tests/loopback/test_engine.py's bound) and 15 ms at most: an actor's tail is longer
    than a process's (worst request 2.4-6.4 ms over 75 runs here, with the cluster's own
    daemons on the same two cores). Measured requests only: as there, the warm-up ones, which
    also open the connections, are left out."""
    res, log = ray_run
    df = load_run(res.run_dir)
    df = df[~df["warmup"]]
    assert len(df) == N
    excess = []
    for rid, send, first in zip(df["response_id"], df["t_send_ns"], df["t_first_token_ns"]):
        gt = log[rid]
        ours = (first - send) / MS
        theirs = (gt["first_token_ns"] - gt["recv_ns"]) / MS
        assert ours >= 5.0
        excess.append(ours - theirs)
    assert min(excess) >= 0, excess  # one clock: never before the server sent it
    assert_percentiles(excess, "Ray actor: TTFT excess over the server's", p50=2.0, max=15.0)


class _Method:
    def __init__(self, fn: Any) -> None:
        self.remote = fn


class _FakeActor:
    """Stands in for an actor handle: ``pull.remote`` hands out the scripted batches."""

    def __init__(self, batches: list[tuple[bytes, str | None]]) -> None:
        self.batches, self.pushed = list(batches), []
        self.push = _Method(lambda seq, data: self.pushed.append((seq, data)))
        self.pull = _Method(lambda _wait: self._next())

    async def _next(self) -> tuple[bytes, str | None]:
        return self.batches.pop(0)


def test_channel_cuts_batches_into_frames_wherever_they_split() -> None:
    """A pull's batch ends where the actor's buffer did, mid-header or mid-payload; frames come
    out whole and in order, and the stream's end is the worker's own."""
    from loadgen.runner import frames
    from loadgen.runner.cluster import RayChannel

    pong, record = frames.frame(frames.PONG, bytes(8)), frames.frame(frames.RECORD, b"x" * 300)
    wire = pong + record + frames.frame(frames.DONE)
    cuts = [0, 3, 7, 150, 151, len(wire)]
    batches: list[tuple[bytes, str | None]] = [(wire[a:b], None) for a, b in zip(cuts, cuts[1:])]
    batches.append((b"", ""))
    fake = _FakeActor(batches)

    async def go() -> tuple[list[tuple[int, bytes]], str]:
        async def no_node(_node_id: str) -> bool | None:
            return None

        async def closed() -> None:
            return None

        ch = RayChannel(0, fake, {"node_ip": "127.0.0.1", "node_id": "ab" * 28}, no_node, closed)
        ch.send(b"one")
        ch.send(b"two")
        got = [f async for f in ch.frames()]
        return got, await ch.lost_reason()

    got, reason = asyncio.run(go())
    assert got == [(frames.PONG, bytes(8)), (frames.RECORD, b"x" * 300), (frames.DONE, b"")]
    assert reason == "its worker stopped"
    assert fake.pushed == [(0, b"one"), (1, b"two")]


class _IdleActor:
    """An actor handle whose worker never writes: every pull waits 10 ms and comes back empty.
    Counts every call made to it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.push = _Method(lambda seq, data: self.calls.append("push"))
        self.pull = _Method(lambda _wait: self._call("pull"))
        self.finish = _Method(lambda _grace: self._call("finish"))

    async def _call(self, name: str) -> tuple[bytes, None]:
        self.calls.append(name)
        await asyncio.sleep(0.01)
        return b"", None


def test_a_closed_channel_makes_no_ray_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray connects on first use: any call made after the run's connection has ended starts a
    new local Ray cluster in the driver (a CI run once went on against such a cluster, with one
    node and 2 CPUs). Once ``close`` hands the connection back, the channel's reader stops
    pulling and ``send`` stops pushing."""
    import ray

    from loadgen.runner import frames
    from loadgen.runner.cluster import RayChannel

    killed: list[Any] = []
    monkeypatch.setattr(ray, "kill", lambda handle, no_restart=True: killed.append(handle))
    actor = _IdleActor()

    async def go() -> tuple[int, list[str]]:
        async def no_node(_node_id: str) -> bool | None:
            return None

        at_release: list[int] = []

        async def released() -> None:
            at_release.append(len(actor.calls))

        ch = RayChannel(0, actor, {"node_ip": "127.0.0.1", "node_id": "ab" * 28}, no_node, released)
        reader = asyncio.create_task(_drain(ch.frames()))
        await asyncio.sleep(0.1)  # the reader polls
        await ch.close()
        await asyncio.wait_for(reader, 1.0)  # and ends, without pulling again
        ch.send(frames.frame(frames.STOP))
        await asyncio.sleep(0.05)
        return at_release[0], list(actor.calls)

    calls_at_release, calls = asyncio.run(go())
    assert killed == [actor]
    assert "push" in calls[:calls_at_release] and "finish" in calls[:calls_at_release]  # QUIT, grace
    assert calls[calls_at_release:] == [], calls[calls_at_release:]


async def _drain(it: Any) -> None:
    async for _ in it:
        pass


@pytest.mark.timing_absolute
def test_nothing_listening_is_a_one_line_error() -> None:
    from loadgen.runner.cluster import ray_channels

    port = _free_port()  # bound and closed at once: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(RunError) as err:
        asyncio.run(ray_channels(f"127.0.0.1:{port}", 2, lambda _msg: None))
    msg = str(err.value)
    assert_within(time.monotonic() - t0, 10.0, "the refusal came back after", unit="s")
    assert "\n" not in msg
    assert f"127.0.0.1:{port}" in msg and "ray start --head" in msg


def test_auto_is_one_actor_per_cluster_cpu_less_one(ray_cluster: Cluster) -> None:
    """4 CPUs in the cluster: 3 actors, each reporting its node; closing them ends the driver's
    connection, which ``ray_channels`` opened."""
    import ray

    from loadgen.runner.cluster import ray_channels

    async def start_and_close() -> list[str]:
        channels = await ray_channels(ray_cluster.address, "auto", lambda _msg: None)
        try:
            return [ch.label for ch in channels]
        finally:
            await asyncio.gather(*(ch.close() for ch in channels))

    labels = asyncio.run(start_and_close())
    assert len(labels) == 3
    assert all(re.fullmatch(r"ray node \S+ \([0-9a-f]{8}\) actor \d", label) for label in labels), labels
    assert not ray.is_initialized()
    assert _ray_daemons_of_this_process() == []


def test_more_actors_than_cluster_cpus_is_a_one_line_error(ray_cluster: Cluster) -> None:
    import ray

    from loadgen.runner.cluster import ray_channels

    with pytest.raises(RunError) as err:
        asyncio.run(ray_channels(ray_cluster.address, 5, lambda _msg: None))
    msg = str(err.value)
    assert msg.startswith("--workers 5 needs 5 CPUs of the Ray cluster (one per actor) and it has 4;"), msg
    assert not ray.is_initialized()


def test_without_ray_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from loadgen.runner.cluster import ray_channels

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    with pytest.raises(RunError) as err:
        asyncio.run(ray_channels("auto", 2, lambda _msg: None))
    assert str(err.value) == "--ray needs Ray: pip install 'loadgen[ray]'"


@pytest.mark.parametrize("lose", ["actor", "node"])
def test_a_lost_worker_costs_only_its_own_requests(ray_cluster: Cluster, tmp_path: Path, lose: str) -> None:
    """Mid-run, the second node's actor process is killed ("actor"), or every process of that
    node (its raylet, agents and actor: "node"). That worker is reported lost, naming the node
    when the node went, its in-flight requests are recorded as worker_lost, the other worker
    finishes its share, and the run says it is incomplete. "node" runs last: the module's
    cluster has one node after it."""
    victim = ray_cluster.second_node_id[:8]
    placed = asyncio.Event()
    labels: list[str] = []

    def on_status(msg: str) -> None:
        if "Ray workers:" in msg:
            labels.append(msg)
            placed.set()

    async def kill() -> None:
        await placed.wait()
        assert f"({victim})" in labels[0], f"no actor on the second node {victim}: {labels[0]}"
        await asyncio.sleep(1.0)  # requests in flight on both workers
        procs = _processes()
        pids = _with_descendants({ray_cluster.second_raylet}, procs)  # a lost machine: all at once
        if lose == "actor":
            pids = {pid for pid in pids if procs[pid][1].startswith("ray::WorkerActor")}
            assert len(pids) == 1, {pid: procs[pid][1] for pid in pids}
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

    async def run_and_kill(profile: Any) -> Any:
        killer = asyncio.create_task(kill())
        try:
            return await api.run_async(profile, on_status=on_status)
        finally:
            await killer

    with StreamServer(ttft_ms=5, itl_ms=10) as server:
        profile = helpers.profile(
            tmp_path,
            server.url,
            **{
                "workload.num_requests": 120,
                "load.concurrency": 4,
                "workload.output_tokens": 10,
                "client.ray": ray_cluster.address,
                "client.workers": 2,
            },
        )
        t0 = time.monotonic()
        res = asyncio.run(run_and_kill(profile))
    s = res.summary
    assert s["complete"] is False
    lost = {w["worker"]: w["lost"] for w in s["client"]["workers"]}
    (survivor,) = (k for k, why in lost.items() if why is None)
    (gone,) = (why for why in lost.values() if why is not None)
    print(f"the run that lost its {lose} took {time.monotonic() - t0:.1f} s; the worker {gone!r}")
    assert gone in s["incomplete_reason"]
    if lose == "node":
        assert gone == f"its Ray actor died: node {gone.split()[5]} ({victim}) was lost", gone
    else:  # Ray's own cause, on one line
        assert gone.startswith("its Ray actor died: ") and "was lost" not in gone and "\n" not in gone, gone
    lines = [json.loads(x) for x in (res.run_dir / "requests.jsonl").read_text().splitlines()]
    ids = [rec["id"] for rec in lines]
    assert len(ids) == len(set(ids)) < 120  # each once; the lost worker's unsent share was not sent
    failed = [rec for rec in lines if not rec["ok"]]
    assert failed and all(rec["error_class"] == "worker_lost" for rec in failed)
    mine = [rec for rec in lines if rec["worker"] == survivor]
    assert len(mine) == 60 and all(rec["ok"] for rec in mine)
    import ray

    assert not ray.is_initialized() and _ray_daemons_of_this_process() == []  # a lost actor too
