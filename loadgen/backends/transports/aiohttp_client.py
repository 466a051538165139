"""The ``aiohttp`` transport: one ClientSession with a connection cap set from the load.

What vLLM's and SGLang's benchmark clients use, so a user can measure with the same HTTP stack
as the tool they are comparing against.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from loadgen import records as R
from loadgen.backends.transports.base import (
    Consumer,
    TransportOptions,
    classify_common,
    connect_timed_out,
    describe,
    tls_context,
)
from loadgen.clock import now_ns


class AiohttpTransport:
    def __init__(self, opts: TransportOptions) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self._base = opts.base_url.rstrip("/")
        ctx = tls_context(opts)
        self._https = ctx is not None
        self._connect_s = opts.connect_timeout_s
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
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
        async with self._session.post(self._base + path, data=body) as resp:
            consumer.head(resp.status, resp.headers, now_ns())
            read = resp.content.readany
            while raw := await read():
                if not consumer.feed(now_ns(), raw):
                    return

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
