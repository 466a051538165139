"""The ``aiohttp`` transport: one ClientSession with a connection cap set from the load.

What vLLM's and SGLang's benchmark clients use, so a user can measure with the same HTTP stack
as the tool they are comparing against. aiohttp reuses any pooled connection that has not seen
its close yet; the connector here asks ``ConnLife`` and ``eof_pending`` first (through
``BaseConnector.connect``, its public seam), and a request whose reused connection ended before
a byte of the answer (aiohttp's parser had not started a message) is sent once more.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Mapping
from typing import Any

from loadgen import records as R
from loadgen.backends.transports.base import (
    RETRY_REASON,
    ConnLife,
    Consumer,
    TransportOptions,
    classify_common,
    connect_timed_out,
    describe,
    eof_pending,
    tls_context,
)
from loadgen.clock import now_ns


class _Attempt:
    """What the connector and the request tell each other: the connection's life, whether it
    carried a request before this one, whether a fresh connection is wanted (the re-send), and
    whether the response's head arrived."""

    __slots__ = ("life", "reused", "fresh", "answered")

    def __init__(self) -> None:
        self.life: ConnLife | None = None
        self.reused = False
        self.fresh = False
        self.answered = False


# The request in flight in this task; the connector fills it in (a holder, so a copied context
# in aiohttp's timeout machinery still reaches the same object).
_ATTEMPT: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("loadgen_aiohttp", default=None)


def _connector(aiohttp: Any, **kwargs: Any) -> Any:
    """A TCPConnector that hands out a pooled connection only while the server keeps it."""

    class KeptConnector(aiohttp.TCPConnector):  # type: ignore[misc]
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.lives: weakref.WeakKeyDictionary[Any, ConnLife] = weakref.WeakKeyDictionary()

        async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
            attempt = _ATTEMPT.get()
            while True:
                conn = await super().connect(req, traces, timeout)
                proto = conn.protocol
                life = self.lives.get(proto)
                reused = life is not None
                if life is None:
                    life = self.lives[proto] = ConnLife()
                elif (
                    (attempt is not None and attempt.fresh)
                    or not life.reusable(now_ns())
                    or eof_pending(conn.transport.get_extra_info("socket"))
                ):
                    conn.close()  # the connector forgets a closed connection; take another
                    continue
                life.sent += 1
                if attempt is not None:
                    attempt.life, attempt.reused = life, reused
                return conn

    return KeptConnector(**kwargs)


class AiohttpTransport:
    def __init__(self, opts: TransportOptions) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self._base = opts.base_url.rstrip("/")
        ctx = tls_context(opts)
        self._https = ctx is not None
        self._connect_s = opts.connect_timeout_s
        self._session = aiohttp.ClientSession(
            connector=_connector(
                aiohttp,
                limit=opts.max_connections or 0,
                limit_per_host=0,
                keepalive_timeout=60.0,
                ssl=ctx if ctx is not None else True,
            ),
            headers=dict(opts.headers),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=opts.connect_timeout_s, sock_read=opts.read_timeout_s
            ),
            auto_decompress=False,
            trust_env=False,
        )

    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None:
        attempt = _Attempt()
        token = _ATTEMPT.set(attempt)
        try:
            try:
                await self._post(path, body, consumer, attempt)
            except (self._aiohttp.ServerDisconnectedError, self._aiohttp.ClientOSError) as exc:
                if not (attempt.reused and not attempt.answered and self._unanswered(exc)):
                    raise
                consumer.resent(now_ns(), RETRY_REASON)
                attempt.fresh = True
                await self._post(path, body, consumer, attempt)
        finally:
            _ATTEMPT.reset(token)

    def _unanswered(self, exc: BaseException) -> bool:
        """No byte of the answer was parsed: aiohttp's parser starts a message on the first
        byte, and a ServerDisconnectedError then carries the partial message instead of text."""
        if isinstance(exc, self._aiohttp.ServerDisconnectedError):
            return isinstance(exc.message, str)
        return True  # a reset: aiohttp does not say whether a partial head came before it

    async def _post(self, path: str, body: bytes, consumer: Consumer, attempt: _Attempt) -> None:
        async with self._session.post(self._base + path, data=body) as resp:
            attempt.answered = True
            consumer.head(resp.status, resp.headers, now_ns())
            read = resp.content.readany
            while raw := await read():
                if not consumer.feed(now_ns(), raw):
                    return
            life = attempt.life
            if life is not None:
                said = resp.headers.get("Connection", "").lower()
                keep = "keep-alive" in said if (resp.version or (1, 1)) < (1, 1) else "close" not in said
                value = resp.headers.get("Keep-Alive")
                life.answered({} if value is None else {"keep-alive": value}, keep)
                life.idle_since_ns = now_ns()

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]:
        t = self._aiohttp.ClientTimeout(total=timeout_s, connect=min(timeout_s, self._connect_s))
        async with self._session.get(self._base + path, timeout=t) as resp:
            return resp.status, resp.headers, await resp.read()

    def classify(self, exc: BaseException) -> tuple[str, str]:
        aiohttp = self._aiohttp
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return connect_timed_out(exc, self._https)
        if isinstance(exc, aiohttp.ClientConnectorError):
            return R.CONNECT, describe(exc)
        if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
            return R.TIMEOUT, describe(exc)
        if isinstance(
            exc,
            (
                aiohttp.ClientPayloadError,
                aiohttp.ServerDisconnectedError,
                aiohttp.ClientOSError,
                aiohttp.ClientResponseError,
            ),
        ):
            return R.READ, describe(exc)
        return classify_common(exc)

    async def aclose(self) -> None:
        await self._session.close()
