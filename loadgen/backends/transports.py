"""HTTP transports: the one seam between a protocol adapter and the bytes on the socket.

A transport sends one POST and pushes the response into a ``Consumer``: ``head`` once with the
status and headers, then ``feed`` with every read's bytes exactly as they left the HTTP layer
(de-chunked, never decompressed or split into lines) and the ``perf_counter_ns`` at which that
read returned. Timestamps are taken by the transport, as close to the socket as it can get,
before the adapter parses anything. Each transport maps its own exceptions to loadgen's error
classes, and shares one connection pool per run with limits and timeouts set from the load, not
the libraries' defaults (httpx caps its pool at 100 and times out after 5 s, which would
silently queue a c=256 run).

Three implementations: ``httptools`` (an asyncio Protocol over the C parser uvicorn uses;
timestamps inside ``data_received`` and needs no task wake-up per read), ``aiohttp`` and
``httpx``. ``bench/client_overhead.py`` measures them against each other.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Mapping, Protocol

from loadgen import records as R
from loadgen.clock import now_ns


@dataclass(frozen=True, slots=True)
class TransportOptions:
    base_url: str
    headers: Mapping[str, str]
    max_connections: int | None  # None: no cap (an uncapped open loop must never queue in the pool)
    connect_timeout_s: float
    read_timeout_s: float


class Consumer(Protocol):
    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None: ...

    def feed(self, t_ns: int, data: bytes) -> bool:
        """Take one read's body bytes; return False to stop reading (the stream is beyond use)."""
        ...


class Transport(Protocol):
    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None: ...
    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]: ...
    def classify(self, exc: BaseException) -> tuple[str, str]: ...
    async def aclose(self) -> None: ...


class HttpxTransport:
    def __init__(self, opts: TransportOptions) -> None:
        import httpx

        self._httpx = httpx
        self._client = httpx.AsyncClient(
            base_url=opts.base_url,
            headers=dict(opts.headers),
            limits=httpx.Limits(
                max_connections=opts.max_connections,
                max_keepalive_connections=opts.max_connections,
                keepalive_expiry=60.0,
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
        )

    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None:
        async with self._client.stream("POST", path, content=body) as resp:
            consumer.head(resp.status_code, resp.headers, now_ns())
            async for raw in resp.aiter_raw():
                if not consumer.feed(now_ns(), raw):
                    return

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]:
        resp = await self._client.get(path, timeout=timeout_s)
        return resp.status_code, resp.headers, resp.content

    def classify(self, exc: BaseException) -> tuple[str, str]:
        httpx = self._httpx
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return R.CONNECT, _describe(exc)
        if isinstance(exc, httpx.TimeoutException):
            return R.TIMEOUT, _describe(exc)
        if isinstance(exc, (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)):
            return R.READ, _describe(exc)
        return classify_common(exc)

    async def aclose(self) -> None:
        await self._client.aclose()


class AiohttpTransport:
    def __init__(self, opts: TransportOptions) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self._base = opts.base_url.rstrip("/")
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=opts.max_connections or 0, limit_per_host=0, keepalive_timeout=60.0
            ),
            headers=dict(opts.headers),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=opts.connect_timeout_s, sock_read=opts.read_timeout_s
            ),
            auto_decompress=False,
            trust_env=False,
        )

    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None:
        async with self._session.post(self._base + path, data=body) as resp:
            consumer.head(resp.status, resp.headers, now_ns())
            read = resp.content.readany
            while raw := await read():
                if not consumer.feed(now_ns(), raw):
                    return

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]:
        t = self._aiohttp.ClientTimeout(total=timeout_s)
        async with self._session.get(self._base + path, timeout=t) as resp:
            return resp.status, resp.headers, await resp.read()

    def classify(self, exc: BaseException) -> tuple[str, str]:
        aiohttp = self._aiohttp
        if isinstance(exc, aiohttp.ClientConnectorError):
            return R.CONNECT, _describe(exc)
        if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
            return R.TIMEOUT, _describe(exc)
        if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                            aiohttp.ClientOSError, aiohttp.ClientResponseError)):
            return R.READ, _describe(exc)
        return classify_common(exc)

    async def aclose(self) -> None:
        await self._session.close()


class ConnectFailed(Exception):
    """The TCP (or TLS) connection could not be opened in time."""


class ReadTimedOut(Exception):
    """No byte arrived for read_timeout_s."""


class BadHTTP(Exception):
    """The bytes were not a valid HTTP/1.1 response."""


class StreamBroken(Exception):
    """The connection closed before the response was complete."""


def classify_common(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, (ConnectFailed, ConnectionRefusedError, ConnectionAbortedError)):
        return R.CONNECT, _describe(exc)
    if isinstance(exc, BadHTTP):
        return R.MALFORMED, _describe(exc)
    if isinstance(exc, (StreamBroken, ConnectionResetError, BrokenPipeError, EOFError)):
        return R.READ, _describe(exc)
    if isinstance(exc, (ReadTimedOut, TimeoutError, asyncio.TimeoutError)):
        return R.TIMEOUT, _describe(exc)
    if isinstance(exc, OSError):
        return R.CONNECT, _describe(exc)
    return R.CLIENT, _describe(exc)


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"[:300]


def _httptools_transport(opts: TransportOptions) -> Transport:
    from loadgen.backends.rawhttp import HttptoolsTransport

    return HttptoolsTransport(opts)


TRANSPORTS = {"httptools": _httptools_transport, "aiohttp": AiohttpTransport, "httpx": HttpxTransport}


def make_transport(kind: str, opts: TransportOptions) -> Transport:
    return TRANSPORTS[kind](opts)
