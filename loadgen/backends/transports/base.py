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
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from loadgen import records as R


@dataclass(frozen=True, slots=True)
class TransportOptions:
    base_url: str
    headers: Mapping[str, str]
    max_connections: int | None  # None: no cap (an uncapped open loop must never queue in the pool)
    connect_timeout_s: float
    read_timeout_s: float
    ca_bundle: str | None = None  # PEM file of CAs to trust for https:// (a private CA)
    verify_tls: bool = True  # False: accept any certificate (a lab server; recorded loudly)


def tls_context(opts: TransportOptions) -> ssl.SSLContext | None:
    """The client TLS context for an https:// base URL (None for http://), the same for every
    transport: the system's CAs, or ``ca_bundle``'s; no verification when ``verify_tls`` is off."""
    if urlsplit(opts.base_url).scheme != "https":
        return None
    ctx = ssl.create_default_context(cafile=opts.ca_bundle)
    if not opts.verify_tls:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


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


# What a TLS failure usually means, said where the user reads the error.
_TLS_HINTS = (
    ("WRONG_VERSION_NUMBER", "the server did not answer in TLS: is this a plain-HTTP port? use http://"),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "its certificate is not trusted: give target.ca_bundle "
        "(the CA's PEM file), or target.verify_tls: false for a lab server",
    ),
)


def tls_hint(exc: BaseException) -> str | None:
    """A hint for a TLS failure (wrong port, untrusted certificate), or None."""
    text = str(exc)
    for marker, hint in _TLS_HINTS:
        if marker in text:
            return hint
    return None


def connect_timed_out(exc: BaseException, https: bool) -> tuple[str, str]:
    """A connection (TCP, or TLS for https://) not opened in time: ``connect``, with the likely
    cause when TLS was asked for (a plain-HTTP server waits for a request line forever)."""
    msg = describe(exc)
    if https:
        msg += " (no TLS connection: if the port is open, it may be plain HTTP; use http://)"
    return R.CONNECT, msg


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
    """``Type: message`` of an exception, with a hint for TLS failures, at most 300 characters."""
    text = str(exc) or repr(exc)
    hint = tls_hint(exc)
    out = f"{type(exc).__name__}: {text}"[: 300 if hint is None else 160]
    return out if hint is None else f"{out} ({hint})"
