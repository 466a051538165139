"""HTTP transports: the one seam between a protocol adapter and the bytes on the socket.

A transport opens a streaming POST and hands back the status, the headers and an async
iterator of raw body bytes exactly as they came off the socket (no decompression, no line
splitting), so the adapter can timestamp each read before it does anything else. It also
maps its library's exceptions to loadgen's error classes. Both libraries share one client per
run, with pool limits and timeouts set from the load instead of their defaults (httpx caps the
pool at 100 connections and times out after 5 s, which silently queues a c=256 run).
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Mapping, Protocol

from loadgen import records as R


@dataclass(frozen=True, slots=True)
class TransportOptions:
    base_url: str
    headers: Mapping[str, str]
    max_connections: int | None  # None: no cap (an uncapped open loop must never queue in the pool)
    connect_timeout_s: float
    read_timeout_s: float


@dataclass(slots=True)
class StreamResponse:
    status: int
    headers: Mapping[str, str]
    chunks: AsyncIterator[bytes]


class Transport(Protocol):
    def stream_post(self, path: str, body: bytes) -> "AsyncIterator[StreamResponse]": ...
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

    @asynccontextmanager
    async def stream_post(self, path: str, body: bytes) -> AsyncIterator[StreamResponse]:
        async with self._client.stream("POST", path, content=body) as resp:
            yield StreamResponse(resp.status_code, resp.headers, resp.aiter_raw())

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
        return _classify_common(exc)

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

    @asynccontextmanager
    async def stream_post(self, path: str, body: bytes) -> AsyncIterator[StreamResponse]:
        async with self._session.post(self._base + path, data=body) as resp:
            yield StreamResponse(resp.status, resp.headers, resp.content.iter_any())

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
        return _classify_common(exc)

    async def aclose(self) -> None:
        await self._session.close()


def _classify_common(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, (ConnectionRefusedError, ConnectionAbortedError)):
        return R.CONNECT, _describe(exc)
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, EOFError)):
        return R.READ, _describe(exc)
    if isinstance(exc, TimeoutError):
        return R.TIMEOUT, _describe(exc)
    return R.CLIENT, _describe(exc)


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"[:300]


TRANSPORTS = {"httpx": HttpxTransport, "aiohttp": AiohttpTransport}


def make_transport(kind: str, opts: TransportOptions) -> Transport:
    return TRANSPORTS[kind](opts)
