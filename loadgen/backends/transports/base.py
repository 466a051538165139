"""The seam between a protocol adapter and the bytes on the socket, and what every transport shares.

A transport sends one POST and pushes the response into a ``Consumer``: ``head`` once with the
status and headers, then ``feed`` with every read's bytes exactly as they left the HTTP layer
(de-chunked, never decompressed or split into lines) and the ``perf_counter_ns`` at which that
read returned. Timestamps are taken by the transport, as close to the socket as it can get,
before the adapter parses anything. Each transport maps its own exceptions to loadgen's error
classes (``classify_common`` for what they share) and keeps one connection pool per run with
limits and timeouts set from the load, not the libraries' defaults (httpx caps its pool at 100
and times out after 5 s, which would silently queue a c=256 run).

Connection reuse is where a keep-alive client loses requests it never needed to: a server that
said it would close (``Connection: close``, HTTP/1.0, a ``Keep-Alive: max`` reached, an idle
``timeout`` passed), or that has already closed, gets the next request on a socket it will not
read. Every transport asks ``ConnLife`` before reusing a connection and checks the socket for a
pending EOF (``eof_pending``, one ``poll`` with no wait, as curl and httpcore do). A close that
races the next request past every check (the server's FIN still in flight when the request
leaves) ends a *reused* connection before one byte of the answer: that request, and only that
one, is sent once more on a fresh connection, and the consumer is told (``Consumer.resent``).

The httptools and httpx transports also stamp each request's HTTP phases on its record
(``record_of``): whether its connection was reused, and for a fresh one when resolving, the TCP
handshake and the TLS handshake ended; then when its last byte went to the kernel and when the
response's last byte was read. Once a request, never a read: the cost per token does not move.
"""

from __future__ import annotations

import asyncio
import ipaddress
import select
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from loadgen import records as R

# An idle connection is reused only well inside the server's announced Keep-Alive timeout: the
# server's clock started when it sent the last byte, ours when we read it.
IDLE_MARGIN = 0.8
# Without a Keep-Alive header, an idle connection is reused for this long at most: uvicorn (vLLM,
# SGLang), cpp-httplib (llama.cpp), Node and Apache close idle connections after 5 s.
DEFAULT_IDLE_S = 4.0
RETRY_REASON = "reused connection closed before any byte of the answer"


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

    def resent(self, t_ns: int, reason: str) -> None:
        """The request is being sent again, at ``t_ns``, on a fresh connection: the reused one
        it went out on ended before a byte of the answer arrived (never called otherwise)."""
        ...


def record_of(consumer: object) -> R.RequestRecord | None:
    """The record a request's HTTP phases are stamped on: a streaming consumer's (``rec``, which
    every protocol's ``SSEResponse`` has); a GET's collector and the helpers' sinks have none,
    and their requests are not stamped. The transport writes only the phase fields (records.py)."""
    rec = getattr(consumer, "rec", None)
    return rec if isinstance(rec, R.RequestRecord) else None


def ip_literal(host: str) -> bool:
    """True for a numeric address, which needs no lookup (its DNS phase is nothing)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_keep_alive(value: str | None) -> tuple[float | None, int | None]:
    """``Keep-Alive: timeout=5, max=100`` as (timeout seconds, max requests); None where absent
    or unreadable (the header is advisory: a bad one must never fail a request)."""
    timeout: float | None = None
    most: int | None = None
    for part in (value or "").split(","):
        name, _, raw = part.partition("=")
        name, raw = name.strip().lower(), raw.strip().strip('"')
        try:
            if name == "timeout":
                timeout = float(raw)
            elif name == "max":
                most = int(raw)
        except ValueError:
            continue
    return timeout, most


class ConnLife:
    """What the server said about one keep-alive connection, and whether it may carry another
    request. ``sent`` counts the requests it carried; ``answered`` reads each response's
    headers (a ``Keep-Alive`` header's max is taken from the first response on the connection:
    cpp-httplib repeats a fixed max, Apache counts down and says ``close`` on the last one);
    ``idle`` stamps the moment the connection went back to the pool."""

    __slots__ = ("sent", "max_requests", "timeout_ns", "idle_since_ns", "closing")

    def __init__(self) -> None:
        self.sent = 0
        self.max_requests: int | None = None
        self.timeout_ns: int | None = None
        self.idle_since_ns = 0
        self.closing = False  # the server said this response is the connection's last

    def answered(self, headers: Mapping[str, str], keep_alive: bool) -> None:
        """One response's headers (lower-case names) and whether HTTP/1.1 keeps it alive
        (``Connection: close`` and HTTP/1.0 without keep-alive say no)."""
        if not keep_alive:
            self.closing = True
        value = headers.get("keep-alive")
        if value is None:
            return
        timeout, most = parse_keep_alive(value)
        if timeout is not None:
            self.timeout_ns = int(timeout * 1e9)
        if most is not None:
            if self.max_requests is None:
                self.max_requests = most
            if most <= 0:
                self.closing = True

    def reusable(self, t_ns: int) -> bool:
        if self.closing:
            return False
        if self.max_requests is not None and self.sent >= self.max_requests:
            return False
        limit = DEFAULT_IDLE_S * 1e9 if self.timeout_ns is None else self.timeout_ns * IDLE_MARGIN
        return t_ns - self.idle_since_ns < limit


def eof_pending(sock: socket.socket | None) -> bool:
    """True when an idle connection's socket is readable: the server closed it (or sent bytes no
    request asked for); either way it must not carry a request. One ``poll`` with no wait."""
    if sock is None:
        return True
    fd = sock.fileno()
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


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
