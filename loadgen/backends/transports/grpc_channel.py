"""The gRPC transport: one ``grpc.aio`` channel, a protocol's calls as raw message bytes.

The HTTP transports' seam, kept for a protocol that speaks gRPC (``triton_grpc``): ``post_stream``
opens one bidirectional call on ``path`` (``/inference.GRPCInferenceService/ModelStreamInfer``),
writes the one request message the adapter serialized, half-closes, and hands every response
message's bytes to the consumer with the ``now_ns()`` taken the moment ``read`` returned it,
before anything is parsed (the consumer's ``head`` gets the first message's stamp and the
server's initial metadata). The channel carries no serializer: the adapter's bytes go out as
they are and come back as they arrived, so the protobuf work happens in the adapter, after the
stamp. The read goes on until the server ends the call (it does once the request's last
response is out, the client having half-closed), as an HTTP body is read to its end; a consumer
that returns False (the stream is beyond use) ends it early. A call still open then, or when
the task is cancelled (the per-request timeout, the run stopping), is cancelled, so no call
outlives its request. A call with no message for
``read_timeout_s`` is cancelled by one watchdog task and fails as ``ReadTimedOut`` (``timeout``),
as the HTTP transports' reads do.

``grpc`` is the optional extra ``loadgen[grpc]``: imported when a channel is opened, never by
importing this module. Headers become call metadata (lower-case keys; ``authorization: Bearer``
for the API key), less those that only mean something to HTTP/1.1. A status other than OK is an
``AioRpcError``; ``classify`` names its error class (``records.grpc_error_class``; a refused
connection ``connect``, a connection lost mid-stream ``read``, a deadline ``timeout``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from loadgen import records as R
from loadgen.backends.transports.base import Consumer, ReadTimedOut, TransportOptions, classify_common
from loadgen.clock import now_ns

DEFAULT_PORT = 8001  # Triton's gRPC port
WATCHDOG_S = 0.25  # how often open calls are checked against read_timeout_s (as httptools' pool)
SECURE_SCHEMES = ("grpcs", "https")
_HTTP_ONLY = frozenset({"content-type", "accept", "accept-encoding", "connection", "host", "user-agent"})
_CONNECT = ("failed to connect", "connection refused", "dns resolution failed", "name resolution")
_BROKEN = ("socket closed", "connection reset", "broken pipe", "stream removed", "goaway")


def grpc_address(url: str) -> tuple[str, bool]:
    """``grpc://host:port`` (or ``http://``, ``grpcs://``, ``https://``) as gRPC's
    ``host:port`` target, and whether it speaks TLS; no port means Triton's 8001."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port or DEFAULT_PORT}", parts.scheme in SECURE_SCHEMES


def call_metadata(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The run's headers as gRPC metadata: lower-case keys, HTTP/1.1's own headers left out."""
    return tuple((k.lower(), v) for k, v in headers.items() if k.lower() not in _HTTP_ONLY)


class GrpcTransport:
    """One channel per transport (HTTP/2 multiplexes every call over it); see the module doc."""

    __slots__ = (
        "grpc",
        "channel",
        "metadata",
        "read_timeout_s",
        "_streams",
        "_unaries",
        "_active",
        "_watchdog",
    )

    def __init__(self, opts: TransportOptions) -> None:
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # as backends.kserve.quiet_grpc says
        import grpc  # the extra: the adapter says "install loadgen[grpc]" when it is missing
        import grpc.aio

        self.grpc = grpc
        address, secure = grpc_address(opts.base_url)
        # No transparent retries: a request the channel sent again would carry its first send
        # time; loadgen's one visible resend is the HTTP transports' (Consumer.resent).
        options = [
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
            ("grpc.enable_retries", 0),
        ]
        if secure:
            roots = None
            if opts.ca_bundle:
                with open(opts.ca_bundle, "rb") as f:
                    roots = f.read()
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            self.channel = grpc.aio.secure_channel(address, creds, options=options)
        else:
            self.channel = grpc.aio.insecure_channel(address, options=options)
        self.metadata = call_metadata(opts.headers)
        self.read_timeout_s = opts.read_timeout_s
        self._active: dict[Any, list[Any]] = {}  # open calls: [last message's ns, expired]
        self._watchdog: asyncio.Task[None] | None = None
        self._streams: dict[str, Any] = {}
        self._unaries: dict[str, Any] = {}

    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None:
        """One request message on a bidirectional call of ``path``; each response message to
        ``consumer`` with its arrival time, until the stream ends or the consumer says stop."""
        method = self._streams.get(path)
        if method is None:
            method = self._streams[path] = self.channel.stream_stream(path)
        call = method(metadata=self.metadata)
        eof = self.grpc.aio.EOF
        watched = self._watch(call)
        try:
            await call.write(body)
            await call.done_writing()
            msg = await call.read()
            t = watched[0] = now_ns()
            if msg is eof:
                return
            consumer.head(200, dict(await call.initial_metadata() or ()), t)
            while consumer.feed(t, msg):
                msg = await call.read()
                t = watched[0] = now_ns()
                if msg is eof:
                    return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if watched[1] and not (task is not None and getattr(task, "cancelling", lambda: 0)()):
                # The watchdog cancelled the call, not the task: a read timeout, not a stop.
                raise ReadTimedOut(f"no response message for read_timeout_s={self.read_timeout_s}") from None
            raise
        finally:
            self._active.pop(call, None)
            if not call.done():
                call.cancel()

    def _watch(self, call: Any) -> list[Any]:
        """Track ``call`` for the read timeout: [last message's ns, whether it expired]."""
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._expire())
        state = self._active[call] = [now_ns(), False]
        return state

    async def _expire(self) -> None:
        """Every ``WATCHDOG_S``: cancel a call that has had no message for ``read_timeout_s``
        (the HTTP transports' read timeout; one task for all calls, no timer per message)."""
        limit = int(self.read_timeout_s * 1e9)
        while True:
            await asyncio.sleep(WATCHDOG_S)
            t = now_ns()
            for call, state in list(self._active.items()):
                if t - state[0] > limit:
                    state[1] = True
                    call.cancel()

    async def unary(self, path: str, body: bytes, timeout_s: float = 5.0) -> bytes:
        """One unary call of ``path`` with a serialized request; the response's bytes."""
        method = self._unaries.get(path)
        if method is None:
            method = self._unaries[path] = self.channel.unary_unary(path)
        out: bytes = await method(body, metadata=self.metadata, timeout=timeout_s)
        return out

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]:
        """A unary call of ``path`` with an empty request message (``ServerLive``,
        ``ServerReady``, ``ServerMetadata``): status 200 and its bytes; a status other than OK
        raises."""
        return 200, {}, await self.unary(path, b"", timeout_s)

    def classify(self, exc: BaseException) -> tuple[str, str]:
        code = getattr(exc, "code", None)
        if not isinstance(exc, self.grpc.aio.AioRpcError) or code is None:
            return classify_common(exc)
        status = exc.code()
        details = exc.details() or ""
        msg = f"gRPC {status.name}: {details}"[:300]
        low = details.lower()
        if status == self.grpc.StatusCode.DEADLINE_EXCEEDED:
            return R.TIMEOUT, msg
        if status == self.grpc.StatusCode.UNAVAILABLE:
            if any(m in low for m in _CONNECT):
                return R.CONNECT, msg
            if any(m in low for m in _BROKEN):
                return R.READ, msg
        return R.grpc_error_class(status.name), msg

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        await self.channel.close()
