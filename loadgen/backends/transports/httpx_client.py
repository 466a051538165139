"""The ``httpx`` transport: httpx's AsyncClient with explicit pool limits and timeouts.

Kept for users whose environment standardises on httpx; it costs the most CPU per streamed
token of the three (``bench/client_overhead.py``). httpcore itself declines a pooled connection
whose socket is readable (an EOF pending) and honours ``Connection: close`` and HTTP/1.0; here
the client is built at its first stream, with the idle expiry the server announced in any answer
before it (the probe's), and a connection whose ``Keep-Alive: max`` is spent is shut down as its
last response ends, so httpcore drops it. httpcore raises the same error whether or not a partial
status line came before a close, so a reused connection that ends before the response head is
taken as unanswered and its request is sent once more.

A request's HTTP phases come from httpcore's own trace events (the ``trace`` extension), never
guessed: ``connect_tcp`` (its start and end; httpcore resolves a host name inside it, so only
an IP literal, which needs no lookup, gets a DNS stamp), ``start_tls``, the request body sent
(``send_request_body``) and the response body read to its end (``receive_response_body``).
"""

from __future__ import annotations

import os
import socket
import weakref
from collections.abc import Mapping
from typing import Any

from loadgen import records as R
from loadgen.backends.transports.base import (
    DEFAULT_IDLE_S,
    IDLE_MARGIN,
    RETRY_REASON,
    ConnLife,
    Consumer,
    TransportOptions,
    classify_common,
    connect_timed_out,
    describe,
    ip_literal,
    parse_keep_alive,
    record_of,
    tls_context,
)
from loadgen.clock import now_ns


class HttpxTransport:
    def __init__(self, opts: TransportOptions) -> None:
        import httpx

        self._httpx = httpx
        self._opts = opts
        self._https = opts.base_url.startswith("https://")
        self._literal = ip_literal(httpx.URL(opts.base_url).host)
        self._connect_s = opts.connect_timeout_s
        self._idle_s = DEFAULT_IDLE_S
        self._probe = self._client_for(DEFAULT_IDLE_S)
        self._client: Any = None
        self._lives: weakref.WeakKeyDictionary[Any, ConnLife] = weakref.WeakKeyDictionary()

    def _client_for(self, idle_s: float) -> Any:
        httpx, opts = self._httpx, self._opts
        return httpx.AsyncClient(
            base_url=opts.base_url,
            headers=dict(opts.headers),
            limits=httpx.Limits(
                max_connections=opts.max_connections,
                max_keepalive_connections=opts.max_connections,
                keepalive_expiry=idle_s,
            ),
            timeout=httpx.Timeout(
                connect=opts.connect_timeout_s,
                read=opts.read_timeout_s,
                write=opts.read_timeout_s,
                # Waiting for a pool slot is client-side queueing; never let it fail a request.
                pool=None,
            ),
            follow_redirects=False,
            trust_env=False,
            verify=tls_context(opts) or True,
        )

    def _learn(self, headers: Mapping[str, str]) -> None:
        timeout, _ = parse_keep_alive(headers.get("keep-alive"))
        if timeout is not None and self._client is None:
            self._idle_s = min(DEFAULT_IDLE_S, timeout * IDLE_MARGIN)

    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None:
        if self._client is None:
            self._client = self._client_for(self._idle_s)
        rec = record_of(consumer)
        phases = _Phases(rec, self._literal)
        answered: list[bool] = []
        try:
            await self._post(path, body, consumer, phases.trace, answered)
        except (self._httpx.RemoteProtocolError, self._httpx.ReadError, self._httpx.WriteError):
            if phases.opened or answered:
                raise
            consumer.resent(now_ns(), RETRY_REASON)
            # httpcore takes a pooled connection before opening one; the re-send must not land on
            # another that the same server is closing, so it goes on a client of its own.
            async with self._client_for(self._idle_s) as fresh:
                await self._post(path, body, consumer, phases.trace, answered, fresh)
        finally:
            if rec is not None:
                rec.conn_reused = not phases.opened

    async def _post(
        self, path: str, body: bytes, consumer: Consumer, trace: Any, answered: list[bool], client: Any = None
    ) -> None:
        ext = {} if trace is None else {"trace": trace}
        async with (client or self._client).stream("POST", path, content=body, extensions=ext) as resp:
            answered.append(True)
            consumer.head(resp.status_code, resp.headers, now_ns())
            async for raw in resp.aiter_raw():
                if not consumer.feed(now_ns(), raw):
                    return
            if client is None:
                self._spent(resp)

    def _spent(self, resp: Any) -> None:
        """Count the response against its connection's ``Keep-Alive: max``; when that is spent,
        shut the socket down so httpcore sees it readable and never hands it out again."""
        stream = resp.extensions.get("network_stream")
        if stream is None:
            return
        life = self._lives.get(stream)
        if life is None:
            life = self._lives[stream] = ConnLife()
        life.sent += 1
        life.answered(resp.headers, keep_alive=True)  # Connection: close is httpcore's to honour
        if life.max_requests is not None and life.sent >= life.max_requests:
            sock = stream.get_extra_info("socket")
            fd = -1 if sock is None else sock.fileno()
            if fd < 0:
                return
            # uvloop's transport sockets refuse shutdown(); a duplicate of the descriptor names
            # the same socket, and shutdown acts on the socket, not on the descriptor.
            try:
                with socket.socket(fileno=os.dup(fd)) as dup:
                    dup.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed: httpcore drops it anyway

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]:
        timeout = self._httpx.Timeout(timeout_s, connect=min(timeout_s, self._connect_s))
        resp = await (self._client or self._probe).get(path, timeout=timeout)
        self._learn(resp.headers)
        return resp.status_code, resp.headers, resp.content

    def classify(self, exc: BaseException) -> tuple[str, str]:
        httpx = self._httpx
        if isinstance(exc, httpx.ConnectTimeout):
            return connect_timed_out(exc, self._https)
        if isinstance(exc, httpx.ConnectError):
            return R.CONNECT, describe(exc)
        if isinstance(exc, httpx.TimeoutException):
            return R.TIMEOUT, describe(exc)
        if isinstance(exc, (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)):
            return R.READ, describe(exc)
        return classify_common(exc)

    async def aclose(self) -> None:
        await self._probe.aclose()
        if self._client is not None:
            await self._client.aclose()


class _Phases:
    """One request's httpcore trace events as its record's phase stamps. ``opened``: the request
    (its last attempt) went out on a connection httpcore opened for it."""

    __slots__ = ("rec", "literal", "opened")

    def __init__(self, rec: R.RequestRecord | None, literal: bool) -> None:
        self.rec, self.literal, self.opened = rec, literal, False

    async def trace(self, event: str, info: Mapping[str, Any]) -> None:
        t, rec = now_ns(), self.rec
        if event == "connection.connect_tcp.started":
            self.opened = True
            if rec is not None:
                rec.t_conn_start_ns = t
                rec.t_dns_ns = t if self.literal else None
                rec.t_connect_ns = rec.t_tls_ns = None
        elif rec is None:
            return
        elif event == "connection.connect_tcp.complete":
            rec.t_connect_ns = t
        elif event == "connection.start_tls.complete":
            rec.t_tls_ns = t
        elif event == "http11.send_request_body.complete":
            rec.t_written_ns = t
        elif event == "http11.receive_response_body.complete":
            rec.t_last_byte_ns = t
