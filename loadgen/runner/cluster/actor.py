"""The Ray actor that hosts one worker: the same ``serve`` loop a worker process runs, fed by
method calls instead of a pipe.

A worker process reads frames from stdin and writes them to stdout; an actor has neither, so
this class stands in for both ends. ``push`` feeds the bytes the driver sends into the
``asyncio.StreamReader`` that ``serve`` reads, and everything ``serve`` sends collects in a
buffer that ``pull`` hands back as one batch: records stream back in batches of whatever
arrived since the last pull, so a busy worker costs the driver one call per batch, not one
per record. ``pull`` waits (up to its timeout) for something to arrive, so the driver's
polling is a long poll, not a busy loop.

Ordering: an async actor may start calls out of submission order (a large argument is
fetched from the object store first, and the next call can overtake it), so each push
carries a sequence number and pieces are fed to the stream strictly in that order.

Ray is imported only inside ``start`` (which runs in the actor): ``loadgen.runner.cluster`` wraps
the class with ``ray.remote`` when it connects, so importing loadgen never needs Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from loadgen.runner import frames
from loadgen.runner.worker import identity, serve

_MAX_BATCH = 8 << 20  # bytes per pull: one reply stays a modest object, the rest waits a call
# Records and start notices carry their own timestamps, so they may wait this long after the
# last pull to travel together: fewer Ray calls in the actor's process while it measures (each
# call is gRPC and pickling competing with the worker's event loop for the GIL). Any other
# frame (a PONG, READY, DONE) goes at once: the clock anchoring times the PONG's round trip.
_LINGER_S = 0.02
_BATCHED = frozenset((frames.RECORD, frames.STARTED))
_KIND = frames.HEADER.size - 1  # the kind byte ends a frame's header


class WorkerActor:
    """One worker on a Ray node (``async`` methods: Ray runs them on the actor's event loop,
    the loop ``serve`` runs on, so no method ever races the worker's own code)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._reader: asyncio.StreamReader | None = None
        self._task: asyncio.Task[None] | None = None
        self._out = bytearray()
        self._arrived: asyncio.Event | None = None
        self._urgent: asyncio.Event | None = None
        self._last_pull = 0.0
        self._next_seq = 0
        self._early: dict[int, bytes] = {}
        self._eof = False
        self._node: dict[str, str] = {}

    async def start(self) -> dict[str, Any]:
        """Start ``serve`` on this actor's loop and say where it runs (the driver names the
        worker after its node). Creating the reader here, not in ``__init__``, binds it to the
        loop the methods run on."""
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        # The address the cluster knows the node by (a node started with --node-ip-address
        # may not be the one this host's routing table would pick).
        ips = [n.get("NodeManagerAddress") for n in ray.nodes() if n.get("NodeID") == node_id]
        self._node = {
            "node_ip": ips[0] if ips and ips[0] else ray.util.get_node_ip_address(),
            "node_id": node_id,
        }
        if self._task is None:
            self._reader = asyncio.StreamReader(limit=1 << 24)
            self._arrived, self._urgent = asyncio.Event(), asyncio.Event()
            self._task = asyncio.create_task(serve(self._reader, self._send))
        return {**identity(), **self._node}

    def _send(self, data: bytes) -> None:
        """``serve``'s output: buffered for the next pull. The HELLO frame gains the node, so
        the driver's record of this worker (pool ``info``) names where it ran."""
        if self._node and len(data) > frames.HEADER.size and data[_KIND] == frames.HELLO:
            info = frames.unpickle(data[frames.HEADER.size :])
            data = frames.pickled(frames.HELLO, {**info, **self._node})
        self._out += data
        if self._arrived is not None and self._urgent is not None:
            self._arrived.set()
            if data[_KIND] not in _BATCHED:
                self._urgent.set()

    async def push(self, seq: int, data: bytes) -> None:
        """Bytes from the driver, fed to ``serve`` in the order the driver sent them."""
        reader = self._reader
        if reader is None or self._eof:
            return
        self._early[seq] = data
        while self._next_seq in self._early:
            reader.feed_data(self._early.pop(self._next_seq))
            self._next_seq += 1

    async def pull(self, max_wait_s: float) -> tuple[bytes, str | None]:
        """What ``serve`` sent since the last pull (waiting up to ``max_wait_s`` for something),
        and whether it has ended: None while it serves, "" when it returned, else its error."""
        task, arrived, urgent = self._task, self._arrived, self._urgent
        if task is None or arrived is None or urgent is None:
            return b"", "the actor was not started"
        if not self._out and not task.done():
            arrived.clear()
            await _either(arrived, task, max_wait_s)
        loop = asyncio.get_running_loop()
        linger = self._last_pull + _LINGER_S - loop.time()
        if linger > 0 and not urgent.is_set() and not task.done() and len(self._out) < _MAX_BATCH:
            await _either(urgent, task, linger)
        urgent.clear()
        self._last_pull = loop.time()
        batch = bytes(self._out[:_MAX_BATCH])
        del self._out[:_MAX_BATCH]
        ended = None
        if task.done() and not self._out:
            ended = _outcome(task)
        return batch, ended

    async def finish(self, grace_s: float) -> None:
        """Let ``serve`` end: it normally has a QUIT to read already; if it has not ended
        within ``grace_s``, end its input (as a worker process sees its parent go) and give
        it as long again to close its connections."""
        task, reader = self._task, self._reader
        if task is None or reader is None:
            return
        for last in (False, True):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), grace_s)
            if task.done() or last:
                return
            self._eof = True
            reader.feed_eof()


async def _either(event: asyncio.Event, task: asyncio.Task[None], timeout_s: float) -> None:
    """Until ``event`` is set, ``task`` ends or ``timeout_s`` passes."""
    waiter = asyncio.create_task(event.wait())
    await asyncio.wait({waiter, task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()


def _outcome(task: asyncio.Task[None]) -> str:
    """How ``serve`` ended, as one line: "" when it returned."""
    if task.cancelled():
        return "its worker was cancelled"
    exc = task.exception()
    return "" if exc is None else f"its worker raised {type(exc).__name__}: {exc}"
