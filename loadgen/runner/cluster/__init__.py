"""``--ray auto|local|ADDRESS``: the run's workers as Ray actors spread over a cluster's nodes.

Each actor hosts the very worker a worker process runs (``actor.py``) and the driver reaches
it through a ``RayChannel`` (``channel.py``), so the pool, the split of each stage, the clock
anchoring and the loss accounting are the ones a run on worker processes uses. Ray is an
optional extra (``pip install 'loadgen[ray]'``) and is imported only here, when a profile
asks for it; a missing Ray, an unreachable cluster or a cluster too small for the actors asked
for is a one-line ``RunError`` naming the fix, never a traceback.

Every actor takes one CPU and is placed with Ray's SPREAD strategy (best effort: across the
nodes as evenly as their free CPUs allow), so the load leaves from as many machines as it
can. The driver's connection lasts as long as the actors: when the last channel closes, the
connection this module opened is shut down (one this process had opened already is left as
it was). Ray's own console output is kept down (no worker logs, no usage-stats notice, no
"unhandled error" dumps); its notices of a dead node or worker still reach stderr, from a
thread of Ray's that has no switch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from loadgen.errors import RunError
from loadgen.runner.pool import Channel

from .channel import RayChannel, one_line

__all__ = ["RayChannel", "ray_channels"]

_CONNECT_TIMEOUT_S = 30.0  # ray.init against a cluster that accepts TCP but never answers
_PROBE_TIMEOUT_S = 5.0  # the TCP check of a host:port address before Ray is asked to use it
_ACTORS_TIMEOUT_S = 120.0  # every actor placed, its process started and loadgen imported
_FIX = (
    "start one with `ray start --head`, or pass --ray host:port of its head (ray://host:10001 for Ray Client)"
)
_REINSTALL = "reinstall it: pip install 'loadgen[ray]'"

T = TypeVar("T")


async def ray_channels(address: str, workers: int | str, status: Callable[[str], None]) -> list[Channel]:
    """Connect to the Ray cluster at ``address`` and start ``workers`` actors on it (``auto``:
    one per cluster CPU minus one, at least 1); one channel per actor, in index order."""
    ray = _import_ray()
    session = await _Session.connect(ray, address, status)
    try:
        n = _actor_count(ray, workers)
        cpus = _cpus(ray)
        if n > cpus:
            raise RunError(
                f"--workers {n} needs {n} CPUs of the Ray cluster (one per actor) and it has {cpus}; "
                "ask for fewer, or --workers auto"
            )
        status(f"starting {n} Ray actors on {_describe(ray)}")
        return await _start_actors(ray, session, n)
    except BaseException:
        await session.release(all_of_it=True)
        raise


def _import_ray() -> Any:
    # Ray's own defaults print a usage-stats notice and, when an actor dies, "unhandled error"
    # dumps of the calls that were still queued to it; loadgen reports both its own way.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    # And a Ray call made after the connection ended would start a new local cluster on this
    # machine (Ray connects on first use): the channels make none, and where Ray is first
    # imported here, first use does not connect at all.
    os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
    try:
        import ray
    except ModuleNotFoundError as exc:
        if exc.name == "ray" or (exc.name or "").startswith("ray."):
            raise RunError("--ray needs Ray: pip install 'loadgen[ray]'") from None
        raise RunError(f"--ray could not import Ray: {exc}; {_REINSTALL}") from None
    except ImportError as exc:
        raise RunError(f"--ray could not import Ray: {exc}; {_REINSTALL}") from None
    return ray


class _Session:
    """The driver's connection to the cluster, shared by the run's channels: the last one to
    close ends it, if this module opened it."""

    def __init__(self, ray: Any, owned: bool, n: int = 0) -> None:
        self._ray, self._owned, self.users = ray, owned, n

    @classmethod
    async def connect(cls, ray: Any, address: str, status: Callable[[str], None]) -> _Session:
        if ray.is_initialized():
            status("using this process's Ray connection")
            return cls(ray, owned=False)
        kwargs: dict[str, Any] = {
            "ignore_reinit_error": True,
            "log_to_driver": False,
            "logging_level": logging.ERROR,
        }
        if address.startswith("ray://"):
            await _probe(address, address.removeprefix("ray://"))
            kwargs = {"log_to_driver": False, "logging_level": logging.ERROR}
            status(f"connecting to the Ray cluster at {address} (Ray Client)")
        elif address == "local":
            kwargs |= {"include_dashboard": False}
            status("starting a private local Ray cluster")
        elif address == "auto":
            status("connecting to the Ray cluster this machine belongs to")
        else:
            await _probe(address, address)
            status(f"connecting to the Ray cluster at {address}")
        try:
            if address == "local":
                # Starting a cluster must happen on the main thread (from another one, Ray's
                # processes start but the driver never reaches them); it takes seconds, before
                # any load, and cannot hang on an address.
                ray.init(address=address, **kwargs)
            else:
                await _in_thread(lambda: ray.init(address=address, **kwargs), _CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise RunError(
                f"the Ray cluster at {address} did not answer within {_CONNECT_TIMEOUT_S:g} s; "
                f"check that it is a Ray head and its version matches (Ray {ray.__version__} here)"
            ) from None
        except Exception as exc:  # noqa: BLE001 - anything ray.init raises is a setup problem to state
            if address == "local":
                raise RunError(
                    f"a private local Ray cluster could not start: {one_line(exc)}; "
                    "see `ray start --head` for what it needs, or pass --ray with an address"
                ) from None
            if address == "auto":
                raise RunError(
                    "--ray auto found no running Ray cluster on this machine; start one with "
                    "`ray start --head`, use --ray local for a private one, or pass --ray host:port"
                ) from None
            raise RunError(
                f"cannot connect to the Ray cluster at {address}: {one_line(exc)}; {_FIX}"
            ) from None
        return cls(ray, owned=True)

    def hold(self) -> Callable[[], Awaitable[None]]:
        """A release callback for one more channel."""
        self.users += 1
        return self.release

    async def release(self, all_of_it: bool = False) -> None:
        self.users = 0 if all_of_it else self.users - 1
        if self.users <= 0 and self._owned:
            self._owned = False
            self._ray.shutdown()  # after the load: a disconnect, or stopping a private cluster


async def _probe(address: str, host_port: str) -> None:
    """Fail in seconds, not after Ray's minute of retries, when nothing listens there."""
    host, _, port = host_port.rpartition(":")
    host = host.strip("[]")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), _PROBE_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError, ValueError) as exc:
        if isinstance(exc, asyncio.TimeoutError):
            why = f"no answer within {_PROBE_TIMEOUT_S:g} s"
        else:
            errno = exc.errno if isinstance(exc, OSError) else None
            why = os.strerror(errno) if errno else str(exc)
        raise RunError(f"cannot reach the Ray cluster at {address}: {why}; {_FIX}") from None
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass


async def _in_thread(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()`` in a daemon thread: a connection attempt that hangs must not hold the event
    loop, nor keep the process alive at exit (the default executor's threads would)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            loop.call_soon_threadsafe(_settle, fut, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, fut, result, None)

    threading.Thread(target=run, name="loadgen-ray-connect", daemon=True).start()
    return await asyncio.wait_for(fut, timeout_s)


def _settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def _cpus(ray: Any) -> int:
    return int(ray.cluster_resources().get("CPU", 0))


def _describe(ray: Any) -> str:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} with {_cpus(ray)} CPUs"


def _actor_count(ray: Any, workers: int | str) -> int:
    """``auto``: one actor per cluster CPU, less one for the driver and Ray's own processes."""
    if workers == "auto":
        return max(1, _cpus(ray) - 1)
    return int(workers)


async def _start_actors(ray: Any, session: _Session, n: int) -> list[Channel]:
    from .actor import WorkerActor

    remote = ray.remote(WorkerActor)
    handles = [
        remote.options(num_cpus=1, scheduling_strategy="SPREAD", max_restarts=0, max_task_retries=0).remote(k)
        for k in range(n)
    ]
    try:
        wheres = await asyncio.wait_for(
            asyncio.gather(*(h.start.remote() for h in handles)), _ACTORS_TIMEOUT_S
        )
    except BaseException as exc:
        for h in handles:
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001 - best effort: the driver's exit ends them too
                pass
        if isinstance(exc, asyncio.TimeoutError):
            raise RunError(
                f"the Ray cluster did not start {n} actors within {_ACTORS_TIMEOUT_S:g} s: each needs "
                "1 free CPU (other jobs may hold them); ask for fewer (--workers) or free the cluster"
            ) from None
        if isinstance(exc, ray.exceptions.RayError):
            raise RunError(
                f"a Ray actor could not start: {one_line(exc)}; every node needs this loadgen "
                "installed (same version) in the Python that runs Ray"
            ) from None
        raise
    nodes = _NodeWatch(ray)
    return [RayChannel(k, h, w, nodes.alive, session.hold()) for k, (h, w) in enumerate(zip(handles, wheres))]


class _NodeWatch:
    """Whether a node is still in the cluster, asked when one of its actors is lost: a dead
    node is the likelier cause and the one the user needs to hear."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray

    async def alive(self, node_id: str) -> bool | None:
        try:
            nodes = await asyncio.wait_for(asyncio.to_thread(self._ray.nodes), 10.0)
        except Exception:  # noqa: BLE001 - unknown: the caller then names the actor's own error
            return None
        for node in nodes:
            if node.get("NodeID") == node_id:
                return bool(node.get("Alive"))
        return None
