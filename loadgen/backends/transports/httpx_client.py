"""The ``httpx`` transport: httpx's AsyncClient with explicit pool limits and timeouts.

Kept for users whose environment standardises on httpx; it costs the most CPU per streamed
token of the three (``bench/client_overhead.py``).
"""

from __future__ import annotations

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


class HttpxTransport:
    def __init__(self, opts: TransportOptions) -> None:
        import httpx

        self._httpx = httpx
        self._https = opts.base_url.startswith("https://")
        self._connect_s = opts.connect_timeout_s
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
            verify=tls_context(opts) or True,
        )

    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None:
        async with self._client.stream("POST", path, content=body) as resp:
            consumer.head(resp.status_code, resp.headers, now_ns())
            async for raw in resp.aiter_raw():
                if not consumer.feed(now_ns(), raw):
                    return

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]:
        timeout = self._httpx.Timeout(timeout_s, connect=min(timeout_s, self._connect_s))
        resp = await self._client.get(path, timeout=timeout)
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
        await self._client.aclose()
