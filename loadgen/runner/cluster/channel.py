"""``RayChannel``: the pool's ``Channel`` to one worker hosted by a Ray actor (``actor.py``).

The pool reads a worker's frames from an async iterator and writes to it with a
fire-and-forget ``send``; a worker process gives it a pipe for both. Here ``send`` is an
actor call (numbered, so the actor feeds the bytes in order whatever order Ray starts the
calls in) and ``frames`` long-polls the actor for batches of output and cuts them into
frames again. When the actor is gone (it died, or its node did) the iterator ends, and
``lost_reason`` says which, in one line, so the pool reports it like any lost worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from loadgen.runner import frames

_PULL_WAIT_S = 0.5  # a pull returns as soon as output arrives, else after this long
_CLOSE_GRACE_S = 5.0  # after QUIT: how long the worker may take to close its connections
_LINE = 200  # a reason's length before it stops at a sentence's end
_NODE_VERDICT_S = 5.0  # after an actor stops answering: how long to wait to learn if its node died


class RayChannel:
    """One worker in a Ray actor. ``handle`` is the actor's handle; ``where`` the node the
    actor reported from ``start`` (``node_ip``, ``node_id``), which names the channel: the
    summary lists each worker by its label, so the label is what says where it ran."""

    def __init__(
        self,
        index: int,
        handle: Any,
        where: dict[str, Any],
        is_node_alive: Callable[[str], Awaitable[bool | None]],
        on_close: Callable[[], Awaitable[None]],
    ) -> None:
        self.index = index
        self.node_ip = str(where.get("node_ip") or "?")
        self.node_id = str(where.get("node_id") or "")
        self.label = f"ray node {self.node_ip} ({self.node_id[:8]}) actor {index}"
        self._handle = handle
        self._is_node_alive, self._on_close = is_node_alive, on_close
        self._seq = 0
        self._reason: str | None = None
        self._closed = False
        # Set as close() hands the connection back: from then on no Ray call may be made, as the
        # driver's connection may be shut down and any call would start a new local Ray cluster
        # (Ray connects on first use).
        self._released = False

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the actor without waiting; once it is gone, drop it (the pool
        learns of the loss from ``frames``, and a call to a dead actor only makes noise)."""
        if self._reason is not None or self._released:
            return
        self._handle.push.remote(self._seq, data)
        self._seq += 1

    async def frames(self) -> AsyncIterator[tuple[int, bytes]]:
        import ray

        header, hsize = frames.HEADER, frames.HEADER.size
        buf = bytearray()
        while not self._released:
            try:
                batch, ended = await self._handle.pull.remote(_PULL_WAIT_S)
            except ray.exceptions.RayError as exc:
                if self._released:
                    return  # close() killed it: no loss, and no Ray call after the connection
                # Lost, whatever comes next: a pull that failed may have taken a batch with it,
                # so the stream cannot be trusted again, and an actor that is merely unreachable
                # must not go on loading the target unread.
                self._reason = "its Ray actor stopped answering"  # send() stops here
                with contextlib.suppress(Exception):
                    ray.kill(self._handle, no_restart=True)
                self._reason = await self._why(exc, isinstance(exc, ray.exceptions.ActorDiedError))
                return
            buf += batch
            at = 0
            while len(buf) - at >= hsize:
                size, kind = header.unpack_from(buf, at)
                end = at + hsize + size
                if end > len(buf):
                    break  # the rest of this frame comes in a later batch
                yield kind, bytes(buf[at + hsize : end])
                at = end
            del buf[:at]
            if ended is not None:
                self._reason = ended or "its worker stopped"
                return

    async def _why(self, exc: BaseException, died: bool) -> str:
        """One line: the node was lost, or the actor died (or stopped answering) on a node that
        is still up. A call to an actor on a node that just went down fails at once as
        "unavailable", before the cluster has declared the node dead: then the node's fate is
        awaited a few seconds, so the user hears the cause rather than the symptom."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (0.0 if died else _NODE_VERDICT_S)
        node = f"node {self.node_ip} ({self.node_id[:8]})"
        while True:
            if await self._is_node_alive(self.node_id) is False:
                return f"its Ray actor died: {node} was lost"
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.25)
        if died:
            return f"its Ray actor died: {one_line(exc)}"
        return f"its Ray actor on {node} stopped answering: {one_line(exc)}"

    async def lost_reason(self) -> str:
        return self._reason or "its Ray actor stopped answering"

    async def close(self) -> None:
        """QUIT, a short grace for the worker to close its connections, then kill the actor
        (a worker that does not end cannot keep load running on the cluster)."""
        if self._closed:
            return
        self._closed = True
        import ray

        try:
            if self._reason is None:
                self.send(frames.frame(frames.QUIT))
                with contextlib.suppress(ray.exceptions.RayError, asyncio.TimeoutError):
                    await asyncio.wait_for(self._handle.finish.remote(_CLOSE_GRACE_S / 2), _CLOSE_GRACE_S)
            with contextlib.suppress(ray.exceptions.RayError, ValueError):
                ray.kill(self._handle, no_restart=True)
        finally:
            self._released = True
            await self._on_close()


def one_line(exc: BaseException) -> str:
    """A Ray error's message as one line: its cause when it states one ("The actor is dead
    because ..."), else its first line, and only its first sentences: Ray goes on with lists
    of possible causes and, for some errors, a traceback."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    because = [ln for ln in lines if "because" in ln.lower()]
    sentences = re.split(r"(?<=\.)\s+", (because or lines or [type(exc).__name__])[0])
    text = sentences[0]
    for more in sentences[1:]:
        if len(text) + len(more) > _LINE:
            break
        text += " " + more
    return text[:300]
