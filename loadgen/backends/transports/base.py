"""The seam between a protocol adapter and the bytes on the socket, and what every transport shares.

A transport sends one POST and pushes the response into a ``Consumer``: ``head`` once with the
status and headers, then ``feed`` with every read's bytes exactly as they left the HTTP layer
(de-chunked, never decompressed or split into lines) and the ``perf_counter_ns`` at which that
read returned. Timestamps are taken by the transport, as close to the socket as it can get,
before the adapter parses anything. Each transport maps its own exceptions to loadgen's error
classes (``classify_common`` for what they share) and keeps one connection pool per run with
limits and timeouts set from the load, not the libraries' defaults (httpx caps its pool at 100
and times out after 5 s, which would silently queue a c=256 run).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Mapping, Protocol

from loadgen import records as R


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


class TransportError(Exception):
    """A failure below the protocol: the transport raises it, ``classify`` names its class."""


class ConnectFailed(TransportError):
    """The TCP (or TLS) connection could not be opened in time."""


class ReadTimedOut(TransportError):
    """No byte arrived for read_timeout_s."""


class BadHTTP(TransportError):
    """The bytes were not a valid HTTP/1.1 response."""


class StreamBroken(TransportError):
    """The connection closed before the response was complete."""


def classify_common(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, (ConnectFailed, ConnectionRefusedError, ConnectionAbortedError)):
        return R.CONNECT, describe(exc)
    if isinstance(exc, BadHTTP):
        return R.MALFORMED, describe(exc)
    if isinstance(exc, (StreamBroken, ConnectionResetError, BrokenPipeError, EOFError)):
        return R.READ, describe(exc)
    if isinstance(exc, (ReadTimedOut, TimeoutError, asyncio.TimeoutError)):
        return R.TIMEOUT, describe(exc)
    if isinstance(exc, OSError):
        return R.CONNECT, describe(exc)
    return R.CLIENT, describe(exc)


def describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"[:300]


