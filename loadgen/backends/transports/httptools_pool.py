"""The ``httptools`` transport: HTTP/1.1 keep-alive connections as asyncio Protocols.

Why a third transport: with aiohttp or httpx every read wakes a task through a stream reader,
and that machinery, not the measuring, is most of a client's CPU per streamed token. Here the
read is stamped inside ``data_received`` (the earliest point Python sees the bytes), then, once
every socket ready in that turn of the loop has been read (``ReadBatch``), parsed by httptools
(llhttp, the C parser uvicorn uses; no HTTP parsing is written here) and pushed straight into
the consumer, with no task wake-up in between. What is ours is a plain keep-alive pool:
idle connections are reused only while the server's word allows it and their socket has no EOF
pending (``ConnLife``, ``eof_pending``), broken ones dropped, and a watchdog enforces the read
timeout. The connection itself is ``httptools_conn.py``'s.

A fresh connection is opened in three steps, each stamped on the request's record (its HTTP
phases): the host resolved (an IP literal without a lookup, as asyncio itself does), the TCP
handshake (``sock_connect``, each address in turn), then TLS (``create_connection`` on the
connected socket); a reused one has none of these stamps and ``conn_reused`` true.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from loadgen import records as R
from loadgen.backends.transports.base import (
    RETRY_REASON,
    ConnectFailed,
    Consumer,
    ReadTimedOut,
    StreamBroken,
    TransportOptions,
    classify_common,
    eof_pending,
    ip_literal,
    record_of,
    tls_context,
)
from loadgen.backends.transports.httptools_conn import HttptoolsConn, ReadBatch
from loadgen.clock import now_ns, wait_for

_WATCHDOG_S = 0.25
# A TLS handshake that has not finished in this long will not: a plain-HTTP server waits for a
# request line that a ClientHello never completes, so say so instead of waiting for the
# connect timeout and reporting a bare timeout.
_TLS_HANDSHAKE_S = 5.0


class HttptoolsTransport:
    def __init__(self, opts: TransportOptions) -> None:
        u = urlsplit(opts.base_url)
        self._host = u.hostname or "127.0.0.1"
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._ssl = tls_context(opts)
        self._prefix = u.path.rstrip("/").encode()
        self._literal = ip_literal(self._host)
        host = self._host if u.port is None else f"{self._host}:{u.port}"
        lines = [f"Host: {host}"] + [
            f"{k}: {v}" for k, v in opts.headers.items() if k.lower() not in ("host", "content-length")
        ]
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._opts = opts
        self._batch = ReadBatch()
        self._idle: list[HttptoolsConn] = []
        self._active: set[HttptoolsConn] = set()
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
        await wait_for(self._request(request, sink), timeout_s)
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
            rec = record_of(consumer)
            conn, reused = await self._acquire(rec)
            try:
                await self._send(conn, request, consumer, rec)
            except StreamBroken:
                if not reused or conn.got_bytes:
                    raise
                consumer.resent(now_ns(), RETRY_REASON)
                conn, _ = await self._acquire(rec, fresh=True)
                await self._send(conn, request, consumer, rec)
        finally:
            if self._sem is not None:
                self._sem.release()

    async def _send(
        self, conn: HttptoolsConn, request: bytes, consumer: Consumer, rec: R.RequestRecord | None
    ) -> None:
        self._active.add(conn)
        try:
            reuse = await conn.start(request, consumer, rec)
        except BaseException:
            conn.abort()
            raise
        finally:
            self._active.discard(conn)
        if reuse and not conn.closed:
            conn.life.idle_since_ns = conn.last_io_ns
            self._idle.append(conn)

    async def _acquire(self, rec: R.RequestRecord | None, fresh: bool = False) -> tuple[HttptoolsConn, bool]:
        """A connection and whether it carried requests before: an idle one the server still
        keeps (its word, and no EOF waiting on its socket), else a new one."""
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.closed:
                continue
            transport = conn.transport
            sock = None if transport is None else transport.get_extra_info("socket")
            if conn.life.reusable(now_ns()) and not eof_pending(sock):
                if rec is not None:
                    rec.conn_reused = True
                return conn, True
            conn.abort()
        where = f"{self._host}:{self._port}"
        try:
            conn = await wait_for(self._open(rec), self._opts.connect_timeout_s)
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

    async def _open(self, rec: R.RequestRecord | None) -> HttptoolsConn:
        """A new connection, each of its phases stamped on ``rec``: resolved, connected, TLS."""
        loop = asyncio.get_running_loop()
        t_start = now_ns()
        if self._literal:  # no lookup: the numeric form only, in microseconds, never a thread
            infos = socket.getaddrinfo(
                self._host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
            )
        else:
            infos = await loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
        t_dns = now_ns()
        sock = await _connect(loop, infos)
        t_connect = now_ns()
        handshake_s = None if self._ssl is None else min(_TLS_HANDSHAKE_S, self._opts.connect_timeout_s)
        try:
            _, conn = await loop.create_connection(
                lambda: HttptoolsConn(self._batch),
                sock=sock,
                ssl=self._ssl,
                server_hostname=None if self._ssl is None else self._host,
                ssl_handshake_timeout=handshake_s,
            )
        except BaseException:
            sock.close()
            raise
        t_tls = None if self._ssl is None else now_ns()
        if rec is not None:
            rec.conn_reused = False
            rec.t_conn_start_ns, rec.t_dns_ns, rec.t_connect_ns, rec.t_tls_ns = (
                t_start,
                t_dns,
                t_connect,
                t_tls,
            )
        return conn

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


async def _connect(loop: asyncio.AbstractEventLoop, infos: list[Any]) -> socket.socket:
    """A socket connected to the first of ``infos`` that accepts (asyncio's own order)."""
    error: OSError = OSError(f"no address to connect to ({len(infos)} resolved)")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise error


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
