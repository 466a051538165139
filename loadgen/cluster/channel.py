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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from loadgen.runner import frames

_PULL_WAIT_S = 0.5  # a pull returns as soon as output arrives, else after this long
_CLOSE_GRACE_S = 5.0  # after QUIT: how long the worker may take to close its connections


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

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the actor without waiting; once it is gone, drop it (the pool
        learns of the loss from ``frames``, and a call to a dead actor only makes noise)."""
        if self._reason is not None:
            return
        self._handle.push.remote(self._seq, data)
        self._seq += 1

    async def frames(self) -> AsyncIterator[tuple[int, bytes]]:
        import ray

        header, hsize = frames.HEADER, frames.HEADER.size
        buf = bytearray()
        while True:
            try:
                batch, ended = await self._handle.pull.remote(_PULL_WAIT_S)
            except ray.exceptions.RayError as exc:
                self._reason = await self._why(exc)
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

    async def _why(self, exc: BaseException) -> str:
        """One line: the node was lost, or the actor died on a node that is still up."""
        alive = await self._is_node_alive(self.node_id)
        if alive is False:
            return f"its Ray actor died: node {self.node_ip} ({self.node_id[:8]}) was lost"
        return f"its Ray actor died: {one_line(exc)}"

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
            await self._on_close()


def one_line(exc: BaseException) -> str:
    """A Ray error's message as one line: its cause when it states one ("The actor is dead
    because ..."), else its first line; never the traceback Ray appends."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    because = [ln for ln in lines if "because" in ln.lower()]
    text = (because or lines or [type(exc).__name__])[0]
    return text[:300]
