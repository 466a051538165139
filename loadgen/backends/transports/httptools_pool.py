"""The ``httptools`` transport: HTTP/1.1 keep-alive connections as asyncio Protocols.

Why a third transport: with aiohttp or httpx every read wakes a task through a stream reader,
and that machinery, not the measuring, is most of a client's CPU per streamed token. Here the
read is stamped inside ``data_received`` (the earliest point Python sees the bytes), then, once
every socket ready in that turn of the loop has been read (``_Batch``), parsed by httptools
(llhttp, the C parser uvicorn uses; no HTTP parsing is written here) and pushed straight into
the consumer, with no task wake-up in between. What is ours is a plain keep-alive pool:
idle connections are reused only while the server's word allows it and their socket has no EOF
pending (``ConnLife``, ``eof_pending``), broken ones dropped, and a watchdog enforces the read
timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from loadgen.backends.transports.base import (
    RETRY_REASON,
    BadHTTP,
    ConnectFailed,
    ConnLife,
    Consumer,
    ReadTimedOut,
    StreamBroken,
    TransportOptions,
    classify_common,
    eof_pending,
    tls_context,
)
from loadgen.clock import now_ns

_WATCHDOG_S = 0.25
# A TLS handshake that has not finished in this long will not: a plain-HTTP server waits for a
# request line that a ClientHello never completes, so say so instead of waiting for the
# connect timeout and reporting a bare timeout.
_TLS_HANDSHAKE_S = 5.0
# Responses that never have a body, whatever their headers say (RFC 9112, section 6.3).
_NO_BODY = frozenset((204, 304))
# The first bytes of a TLS record (alert, handshake): what a TLS port answers plain HTTP with.
_TLS_RECORDS = frozenset((b"\x15\x03", b"\x16\x03"))


class _NoConsumer:
    """Stands in for a consumer between requests: bytes with no request to answer are dropped."""

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        return None

    def feed(self, t_ns: int, data: bytes) -> bool:
        return False

    def resent(self, t_ns: int, reason: str) -> None:
        return None


_IDLE = _NoConsumer()


class _Batch:
    """Reads stamped as they come, parsed once every socket ready in this turn of the loop has
    been read.

    When a decode step's tokens reach many connections at once, the loop reads them one after
    another in a single turn; parsing each before reading the next would add the parse of every
    earlier one to the later stamps (about 30 µs each here, so 0.5 ms at 16 streams). The stamps
    stay the instant each read reached Python; only the parsing waits for the turn's reads.
    """

    def __init__(self) -> None:
        self._ready: list[_Conn] = []

    def add(self, conn: _Conn) -> None:
        if not self._ready:
            asyncio.get_running_loop().call_soon(self._flush)
        self._ready.append(conn)

    def _flush(self) -> None:
        ready, self._ready = self._ready, []
        for conn in ready:
            conn.process()


class _Conn(asyncio.Protocol):
    """One connection, one request at a time."""

    def __init__(self, batch: _Batch) -> None:
        self._batch = batch
        self._inbox: list[tuple[int, bytes]] = []
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.busy = False
        self.last_io_ns = 0
        self._consumer: Consumer = _IDLE
        self._parser: httptools.HttpResponseParser | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._t = 0
        self._complete = False
        self._keep_alive = False
        self._stopped = False
        self._until_close = False  # the body ends when the server closes (no length, not chunked)
        self.got_bytes = False
        self.life = ConnLife()

    # -- driving a request
    def start(self, request: bytes, consumer: Consumer) -> asyncio.Future[bool]:
        self._consumer = consumer
        self._parser = httptools.HttpResponseParser(self)
        self._waiter = asyncio.get_running_loop().create_future()
        self._headers = {}
        self._complete = self._stopped = self._until_close = self.got_bytes = False
        self.busy = True
        self.life.sent += 1
        self.last_io_ns = now_ns()
        assert self.transport is not None, "connection_made runs before a connection is handed out"
        self.transport.write(request)
        return self._waiter

    def fail(self, exc: BaseException) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        t = self.last_io_ns = now_ns()
        if self._parser is None or self._stopped:
            return
        self.got_bytes = True
        if not self._inbox:
            self._batch.add(self)
        self._inbox.append((t, data))

    def process(self) -> None:
        """Parse what was read since the last turn, each read with its own stamp. Nothing once
        this side aborted the connection (a failure, a cancel): its request is already over."""
        inbox, self._inbox = self._inbox, []
        for t, data in inbox:
            if self._parser is None or self._stopped or self.closed:
                return
            self._parse(t, data)

    def _parse(self, t: int, data: bytes) -> None:
        assert self._parser is not None  # process() checks
        self._t = t
        try:
            self._parser.feed_data(data)
            if self._body:
                body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
                self._body.clear()
                if not self._consumer.feed(t, body):
                    self._stopped = True
                    self._done(reuse=False)
                    return
        except httptools.HttpParserError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(exc, httptools.HttpParserCallbackError) and cause is not None:
                self.fail(cause)  # the consumer's own failure, raised inside a parser callback
                return
            hint = " (the server answered in TLS: use https://)" if data[:2] in _TLS_RECORDS else ""
            self.fail(BadHTTP(f"invalid HTTP response: {exc}{hint}"))
            return
        except Exception as exc:  # noqa: BLE001 - raised in a Protocol callback it would only be logged
            self.fail(exc)
            return
        if self._complete:
            self._done(reuse=self._keep_alive)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.process()  # bytes read in this turn came before the close
        self.closed = True
        if self._waiter is None or self._waiter.done():
            return
        if self._until_close and exc is None:
            # Valid HTTP/1.1: a body with neither Content-Length nor chunked framing ends with
            # the connection, and llhttp (httptools has no finish()) cannot say so itself.
            self._done(reuse=False)
            return
        if not self.got_bytes:
            why = "the server closed the connection without answering"
        else:
            why = "connection closed before the response was complete"
        self._waiter.set_exception(StreamBroken(f"{why} ({exc or 'EOF'})"))

    # -- httptools callbacks (called from inside feed_data)
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        assert self._parser is not None  # called from inside its feed_data
        status = self._parser.get_status_code()
        h = self._headers
        self._until_close = (
            status >= 200
            and status not in _NO_BODY
            and "content-length" not in h
            and "chunked" not in h.get("transfer-encoding", "").lower()
        )
        self._consumer.head(status, h, self._t)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        # llhttp answers "keep alive?" only inside this callback; after it the state is reset.
        self._complete = True
        assert self._parser is not None  # called from inside its feed_data
        self._keep_alive = self._parser.should_keep_alive()
        self.life.answered(self._headers, self._keep_alive)

    def _done(self, reuse: bool) -> None:
        self.busy = False
        if not reuse:
            self.abort()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(reuse)


class HttptoolsTransport:
    def __init__(self, opts: TransportOptions) -> None:
        u = urlsplit(opts.base_url)
        self._host = u.hostname or "127.0.0.1"
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._ssl = tls_context(opts)
        self._prefix = u.path.rstrip("/").encode()
        host = self._host if u.port is None else f"{self._host}:{u.port}"
        lines = [f"Host: {host}"] + [
            f"{k}: {v}" for k, v in opts.headers.items() if k.lower() not in ("host", "content-length")
        ]
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._opts = opts
        self._batch = _Batch()
        self._idle: list[_Conn] = []
        self._active: set[_Conn] = set()
        self._sem: asyncio.Semaphore | None = None
        self._watchdog: asyncio.Task[None] | None = None

    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None:
        request = (
            b"POST "
            + self._prefix
            + path.encode()
            + b" HTTP/1.1\r\n"
            + self._head
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        await self._request(request, consumer)

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]:
        sink = _Collect()
        request = b"GET " + self._prefix + path.encode() + b" HTTP/1.1\r\n" + self._head + b"\r\n"
        await asyncio.wait_for(self._request(request, sink), timeout_s)
        return sink.status, sink.headers, b"".join(sink.parts)

    async def _request(self, request: bytes, consumer: Consumer) -> None:
        if self._watchdog is None:
            self._watchdog = asyncio.create_task(self._watch())
            if self._opts.max_connections:
                self._sem = asyncio.Semaphore(self._opts.max_connections)
        if self._sem is not None:
            await self._sem.acquire()
        try:
            # Re-sent only when a reused connection ended before one byte of the answer (the
            # server closed it as the request left: it never read it), once, on a fresh
            # connection, and the consumer records it; a request answered in any part is
            # one record whatever became of it.
            conn, reused = await self._acquire()
            try:
                await self._send(conn, request, consumer)
            except StreamBroken:
                if not reused or conn.got_bytes:
                    raise
                consumer.resent(now_ns(), RETRY_REASON)
                conn, _ = await self._acquire(fresh=True)
                await self._send(conn, request, consumer)
        finally:
            if self._sem is not None:
                self._sem.release()

    async def _send(self, conn: _Conn, request: bytes, consumer: Consumer) -> None:
        self._active.add(conn)
        try:
            reuse = await conn.start(request, consumer)
        except BaseException:
            conn.abort()
            raise
        finally:
            self._active.discard(conn)
        if reuse and not conn.closed:
            conn.life.idle_since_ns = conn.last_io_ns
            self._idle.append(conn)

    async def _acquire(self, fresh: bool = False) -> tuple[_Conn, bool]:
        """A connection and whether it carried requests before: an idle one the server still
        keeps (its word, and no EOF waiting on its socket), else a new one."""
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.closed:
                continue
            transport = conn.transport
            sock = None if transport is None else transport.get_extra_info("socket")
            if conn.life.reusable(now_ns()) and not eof_pending(sock):
                return conn, True
            conn.abort()
        loop = asyncio.get_running_loop()
        where = f"{self._host}:{self._port}"
        handshake_s = None if self._ssl is None else min(_TLS_HANDSHAKE_S, self._opts.connect_timeout_s)
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Conn(self._batch),
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    ssl_handshake_timeout=handshake_s,
                ),
                self._opts.connect_timeout_s,
            )
        except asyncio.TimeoutError:
            what = f"no connection to {where} within {self._opts.connect_timeout_s} s"
            if self._ssl is not None:
                what += " (no TLS connection: if the port is open, it may be plain HTTP; use http://)"
            raise ConnectFailed(what) from None
        except ConnectionAbortedError as exc:
            if self._ssl is not None and "handshake" in str(exc).lower():
                raise ConnectFailed(
                    f"the TLS handshake with {where} did not complete: is this a plain-HTTP port? use http://"
                ) from None
            raise ConnectFailed(f"cannot connect to {where}: {exc}") from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {where}: {exc}") from None
        return conn, False

    async def _watch(self) -> None:
        limit = int(self._opts.read_timeout_s * 1e9)
        while True:
            await asyncio.sleep(_WATCHDOG_S)
            t = now_ns()
            for conn in list(self._active):
                if conn.busy and t - conn.last_io_ns > limit:
                    conn.fail(ReadTimedOut(f"no bytes for read_timeout_s={self._opts.read_timeout_s}"))

    def classify(self, exc: BaseException) -> tuple[str, str]:
        return classify_common(exc)

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        for conn in self._idle + list(self._active):
            conn.abort()
        self._idle.clear()


class _Collect:
    """A consumer that keeps the whole body (for small GETs such as /v1/models)."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: Mapping[str, str] = {}
        self.parts: list[bytes] = []

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        self.status, self.headers = status, headers

    def feed(self, t_ns: int, data: bytes) -> bool:
        self.parts.append(data)
        return True

    def resent(self, t_ns: int, reason: str) -> None:
        self.status, self.headers = 0, {}
        self.parts.clear()
