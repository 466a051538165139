"""HTTP/1.1 on the wire for the hostile test server (``hostile.py``): what every mode shares.

It exists so that the plumbing no fault changes lives apart from the faults themselves, and the
server module stays readable: the loop thread, listener and connections (``ThreadedServer``, the
base of ``HostileServer``), reading a request off the socket, building a response head, chunked
and SSE framing, writing one byte at a time, a TCP reset, holding a connection open, a listener
that never accepts. Nothing here knows about modes: ``hostile.py`` decides what to send and
which fault to commit, this module how.

Like the rest of the hostile server it imports only the standard library, never the client side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
}
MAX_HEAD = 64 * 1024  # the stream reader's limit, so the longest request head it accepts


@dataclass
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


@dataclass
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    one_byte: bool = False
    streams: int = 0  # streaming requests received on this connection
    idle_since: float = 0.0  # time.monotonic() when its last response ended (0: none yet)
    extra: list[tuple[str, str]] = field(default_factory=list)

    async def send(self, data: bytes) -> None:
        """Write ``data`` (one byte per write in ``one_byte_writes``); a client that went away
        raises ConnectionResetError rather than letting asyncio warn about writes to a dead socket."""
        w = self.writer
        if not self.one_byte:
            if w.is_closing():
                raise ConnectionResetError("the client went away")
            w.write(data)
            await w.drain()
            return
        for i in range(len(data)):
            if w.is_closing():
                raise ConnectionResetError("the client went away")
            w.write(data[i : i + 1])
            await w.drain()
            await asyncio.sleep(0)


def sse(payload: bytes) -> bytes:
    """One SSE event: ``data: <payload>`` and the blank line that ends it."""
    return b"data: " + payload + b"\n\n"


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked transfer-encoded body."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


def dumps(obj: Any) -> bytes:
    """Compact JSON, as bytes."""
    return json.dumps(obj, separators=(",", ":")).encode()


async def read_request(conn: Conn) -> Request | None:
    """Read one request (head and body, chunked or not); None when the client closed the
    connection cleanly between requests."""
    reader = conn.reader
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None  # closed between requests: the ordinary end of a kept-alive connection
        raise
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    else:
        body = await reader.readexactly(int(headers.get("content-length") or 0))
    return Request(method, target.split("?", 1)[0], version, headers, body)


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """The status line and ``headers``, in order, through the blank line that ends the head."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def reset_connection(conn: Conn) -> None:
    """Abort the connection with a TCP reset (RST), as a crashing server would."""
    sock = conn.writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.writer.transport.abort()


async def fin_after(conn: Conn, delay_s: float, grace_s: float = 0.05) -> bool:
    """End the connection as a server that closes after its response does: wait ``delay_s``,
    send FIN, then keep reading for ``grace_s`` so that a request the client had already sent
    is seen, and dropped unanswered. True when one was (any byte of it arrived)."""
    reader = conn.reader
    got = b""
    with contextlib.suppress(ConnectionError, TimeoutError, asyncio.TimeoutError):
        if delay_s > 0:
            got = await asyncio.wait_for(reader.read(1), delay_s)
    if not got and not conn.writer.is_closing():
        with contextlib.suppress(OSError):
            conn.writer.write_eof()
        with contextlib.suppress(ConnectionError, TimeoutError, asyncio.TimeoutError):
            got = await asyncio.wait_for(reader.read(1), grace_s)
    conn.writer.close()
    return bool(got)


async def hold_connection(conn: Conn) -> None:
    """Send nothing more, keep the connection open, until the client gives up on it."""
    with contextlib.suppress(ConnectionError):
        while await conn.reader.read(65536):
            pass


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

    @property
    def url(self) -> str:
        return f"{'https' if self._tls is not None else 'http'}://{self.host}:{self.port}"

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
