"""One connection of the ``httptools`` transport (``httptools_pool.py`` pools them): an asyncio
Protocol that stamps each read in ``data_received``, the earliest point Python sees the bytes,
and, once every socket ready in that turn of the loop has been read (``ReadBatch``), parses it
with httptools and pushes it into the request's consumer, with no task wake-up in between.
One request at a time; the future ``start`` returns says whether the connection may carry
another. With a record to stamp, it stamps two of the request's HTTP phases: the request's last
byte handed to the kernel (as ``write`` returns with nothing buffered, else when the buffer
drains: the write limits are 0, so ``resume_writing`` says so) and the read that completed the
response."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import cast

import httptools

from loadgen import records as R
from loadgen.backends.transports.base import BadHTTP, ConnLife, Consumer, StreamBroken
from loadgen.clock import now_ns

# Responses that never have a body, whatever their headers say (RFC 9112, section 6.3).
_NO_BODY = frozenset((204, 304))
# The first bytes of a TLS record (alert, handshake): what a TLS port answers plain HTTP with.
_TLS_RECORDS = frozenset((b"\x15\x03", b"\x16\x03"))


class _NoConsumer:
    """Stands in for a consumer between requests: bytes with no request to answer are dropped."""

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        return None

    def feed(self, t_ns: int, data: bytes) -> bool:
        return False

    def resent(self, t_ns: int, reason: str) -> None:
        return None


_IDLE = _NoConsumer()


class ReadBatch:
    """Reads stamped as they come, parsed once every socket ready in this turn of the loop has
    been read.

    When a decode step's tokens reach many connections at once, the loop reads them one after
    another in a single turn; parsing each before reading the next would add the parse of every
    earlier one to the later stamps (about 30 µs each here, so 0.5 ms at 16 streams). The stamps
    stay the instant each read reached Python; only the parsing waits for the turn's reads.
    """

    def __init__(self) -> None:
        self._ready: list[HttptoolsConn] = []

    def add(self, conn: HttptoolsConn) -> None:
        if not self._ready:
            asyncio.get_running_loop().call_soon(self._flush)
        self._ready.append(conn)

    def _flush(self) -> None:
        ready, self._ready = self._ready, []
        for conn in ready:
            conn.process()


class HttptoolsConn(asyncio.Protocol):
    """One connection, one request at a time."""

    def __init__(self, batch: ReadBatch) -> None:
        self._batch = batch
        self._inbox: list[tuple[int, bytes]] = []
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.busy = False
        self.last_io_ns = 0
        self._consumer: Consumer = _IDLE
        self._parser: httptools.HttpResponseParser | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._t = 0
        self._complete = False
        self._keep_alive = False
        self._stopped = False
        self._until_close = False  # the body ends when the server closes (no length, not chunked)
        self.got_bytes = False
        self.life = ConnLife()
        self._rec: R.RequestRecord | None = None  # the record this request's phases go on
        self._unwritten = False  # the request's last byte is still in the transport's buffer

    # -- driving a request
    def start(
        self, request: bytes, consumer: Consumer, rec: R.RequestRecord | None = None
    ) -> asyncio.Future[bool]:
        self._consumer = consumer
        self._rec = rec
        self._unwritten = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter = asyncio.get_running_loop().create_future()
        self._headers = {}
        self._complete = self._stopped = self._until_close = self.got_bytes = False
        self.busy = True
        self.life.sent += 1
        self.last_io_ns = now_ns()
        assert self.transport is not None, "connection_made runs before a connection is handed out"
        self.transport.write(request)
        if rec is not None:
            if self.transport.get_write_buffer_size():
                self._unwritten = True
            else:
                rec.t_written_ns = now_ns()
        return self._waiter

    def fail(self, exc: BaseException) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        # Paused as soon as a byte waits, so resume_writing says the buffer emptied (asyncio's
        # plain transport pauses above ``high``, its TLS one at ``high`` and above).
        tls = transport.get_extra_info("sslcontext") is not None
        self.transport.set_write_buffer_limits(high=1 if tls else 0, low=0)

    def pause_writing(self) -> None:
        return None  # one request at a time: nothing more to hold back

    def resume_writing(self) -> None:
        if self._unwritten and self._rec is not None:
            self._unwritten = False
            self._rec.t_written_ns = now_ns()

    def data_received(self, data: bytes) -> None:
        t = self.last_io_ns = now_ns()
        if self._parser is None or self._stopped:
            return
        self.got_bytes = True
        if not self._inbox:
            self._batch.add(self)
        self._inbox.append((t, data))

    def process(self) -> None:
        """Parse what was read since the last turn, each read with its own stamp. Nothing once
        this side aborted the connection (a failure, a cancel): its request is already over."""
        inbox, self._inbox = self._inbox, []
        for t, data in inbox:
            if self._parser is None or self._stopped or self.closed:
                return
            self._parse(t, data)

    def _parse(self, t: int, data: bytes) -> None:
        assert self._parser is not None  # process() checks
        self._t = t
        try:
            self._parser.feed_data(data)
            if self._body:
                body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
                self._body.clear()
                if not self._consumer.feed(t, body):
                    self._stopped = True
                    self._done(reuse=False)
                    return
        except httptools.HttpParserError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(exc, httptools.HttpParserCallbackError) and cause is not None:
                self.fail(cause)  # the consumer's own failure, raised inside a parser callback
                return
            hint = " (the server answered in TLS: use https://)" if data[:2] in _TLS_RECORDS else ""
            self.fail(BadHTTP(f"invalid HTTP response: {exc}{hint}"))
            return
        except Exception as exc:  # noqa: BLE001 - raised in a Protocol callback it would only be logged
            self.fail(exc)
            return
        if self._complete:
            self._done(reuse=self._keep_alive)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.process()  # bytes read in this turn came before the close
        self.closed = True
        if self._waiter is None or self._waiter.done():
            return
        if self._until_close and exc is None:
            # Valid HTTP/1.1: a body with neither Content-Length nor chunked framing ends with
            # the connection, and llhttp (httptools has no finish()) cannot say so itself.
            if self._rec is not None:
                self._rec.t_last_byte_ns = self.last_io_ns
            self._done(reuse=False)
            return
        if not self.got_bytes:
            why = "the server closed the connection without answering"
        else:
            why = "connection closed before the response was complete"
        self._waiter.set_exception(StreamBroken(f"{why} ({exc or 'EOF'})"))

    # -- httptools callbacks (called from inside feed_data)
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        assert self._parser is not None  # called from inside its feed_data
        status = self._parser.get_status_code()
        h = self._headers
        self._until_close = (
            status >= 200
            and status not in _NO_BODY
            and "content-length" not in h
            and "chunked" not in h.get("transfer-encoding", "").lower()
        )
        self._consumer.head(status, h, self._t)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        # llhttp answers "keep alive?" only inside this callback; after it the state is reset.
        self._complete = True
        assert self._parser is not None  # called from inside its feed_data
        self._keep_alive = self._parser.should_keep_alive()
        self.life.answered(self._headers, self._keep_alive)
        if self._rec is not None:
            self._rec.t_last_byte_ns = self._t

    def _done(self, reuse: bool) -> None:
        self.busy = False
        if not reuse:
            self.abort()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(reuse)
