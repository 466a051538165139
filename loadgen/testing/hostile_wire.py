"""The hostile test server's plumbing (``hostile.py``), what every mode shares:
``ThreadedServer``, the base of ``HostileServer``, owns the loop thread, the listener (or one
that never accepts) and the connections, and hands each request read off a connection to the
subclass's ``_route``. The HTTP/1.1 bytes it reads and writes are ``hostile_http.py``'s,
re-exported here, where they were first defined. Nothing here knows about modes.

Like the rest of the hostile server it imports only the standard library, never the client side.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from typing import Any

from loadgen.testing.hostile_http import (
    MAX_HEAD,
    REASONS,
    Conn,
    Request,
    chunk,
    dumps,
    fin_after,
    hold_connection,
    read_request,
    reset_connection,
    response_head,
    sse,
)

__all__ = [  # the wire's bytes, re-exported for the modules and tests that import them from here
    "MAX_HEAD",
    "REASONS",
    "Conn",
    "Request",
    "ThreadedServer",
    "chunk",
    "dumps",
    "fin_after",
    "hold_connection",
    "read_request",
    "reset_connection",
    "response_head",
    "sse",
]


class ThreadedServer:
    """A raw asyncio HTTP/1.1 server on ``host``, run by its own event loop in a background thread.

    It owns the thread, the loop, the listener and every connection: it reads requests off each
    (kept-alive) connection and hands them to ``_route``, a subclass's, whose False closes the
    connection. ``errors`` lists whatever went wrong inside the server, never raised in its thread.
    ``_dead`` makes it close every connection without reading a request; ``_kill_all`` closes the
    listener and every connection at once."""

    def __init__(
        self, host: str, *, name: str, one_byte: bool = False, tls: ssl.SSLContext | None = None
    ) -> None:
        self.host = host
        self._tls = tls  # a server TLS context: https:// on the same port
        self.port = 0
        self._name = name  # the thread's
        self._one_byte = one_byte  # every connection writes one byte per write
        self._lock = threading.Lock()
        self._errors: list[str] = []
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._dead = False
        self._sockets: list[socket.socket] = []  # never_accepts: the listener and its fillers
        self._accepted = 0  # connections accepted (TLS: handshaken), for tests of connection reuse

    @property
    def url(self) -> str:
        return f"{'https' if self._tls is not None else 'http'}://{self.host}:{self.port}"

    @property
    def connections_accepted(self) -> int:
        """Connections the server accepted so far (over TLS: whose handshake completed)."""
        with self._lock:
            return self._accepted

    @property
    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    def _error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    async def _route(self, conn: Conn, req: Request) -> bool:
        """Answer one request; False closes the connection."""
        raise NotImplementedError

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        """Start the loop thread and wait until the listener is up."""
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10.0) or not self.port:
            raise RuntimeError(f"hostile server failed to start: {self.errors}")

    def _shutdown(self) -> None:
        """Close our own sockets, stop the loop and wait for its thread."""
        for s in self._sockets:
            s.close()
        self._sockets.clear()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(10.0)
            self._thread = None

    def _never_accept(self) -> None:
        """A listener with a backlog of 0, its one queue slot taken by a connection of our own:
        the kernel drops every further SYN, so a client's connect times out."""
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.bind((self.host, 0))
        lsock.listen(0)
        self._sockets.append(lsock)
        self.port = lsock.getsockname()[1]
        for _ in range(2):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect((self.host, self.port))
            self._sockets.append(filler)
        time.sleep(0.05)  # let the fillers' handshakes fill the queue

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        loop.set_exception_handler(self._on_loop_error)
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # noqa: BLE001 - recorded for the test, never raised in a thread
            self._error(f"server loop failed: {exc!r}")
        finally:
            self._ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        self._error(f"{ctx.get('message')}: {ctx.get('exception')!r}")

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._server = await asyncio.start_server(
            self._handle, self.host, 0, backlog=256, limit=MAX_HEAD, ssl=self._tls
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        self._kill_all()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        await asyncio.gather(*tasks, return_exceptions=True)

    def _kill_all(self) -> None:
        """Close the listener and every connection at once (a dying server, or the end)."""
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        for t in list(self._tasks):
            if t is not asyncio.current_task():
                t.cancel()

    # ------------------------------------------------------------------ connections
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        with self._lock:
            self._accepted += 1
        conn = Conn(reader, writer, one_byte=self._one_byte)
        try:
            if self._dead:
                return
            while True:
                req = await read_request(conn)
                if req is None or self._dead:
                    return
                if not await self._route(conn, req) or not req.keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError, TimeoutError):
            pass  # the client (or our own shutdown) ended the connection
        except Exception as exc:  # noqa: BLE001 - a bug here is reported to the test, not raised
            self._error(f"handler: {exc!r}")
        finally:
            self._writers.discard(writer)
            if task is not None:
                self._tasks.discard(task)
            if not writer.is_closing():
                writer.close()
