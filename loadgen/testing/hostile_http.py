"""HTTP/1.1 bytes for the hostile test server (``hostile.py``): a request read off the socket, a
response head, chunked and SSE framing, writing one byte at a time, and the ways a connection
ends badly (a TCP reset, a FIN after the response, a connection held open). Nothing here knows
about modes: ``hostile.py`` decides what to send and which fault to commit, this module how;
the thread, listener and connections that carry it are ``hostile_wire.py``'s.

Like the rest of the hostile server it imports only the standard library, never the client side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
}
MAX_HEAD = 64 * 1024  # the stream reader's limit, so the longest request head it accepts


@dataclass
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


@dataclass
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    one_byte: bool = False
    streams: int = 0  # streaming requests received on this connection
    idle_since: float = 0.0  # time.monotonic() when its last response ended (0: none yet)
    extra: list[tuple[str, str]] = field(default_factory=list)

    async def send(self, data: bytes) -> None:
        """Write ``data`` (one byte per write in ``one_byte_writes``); a client that went away
        raises ConnectionResetError rather than letting asyncio warn about writes to a dead socket."""
        w = self.writer
        if not self.one_byte:
            if w.is_closing():
                raise ConnectionResetError("the client went away")
            w.write(data)
            await w.drain()
            return
        for i in range(len(data)):
            if w.is_closing():
                raise ConnectionResetError("the client went away")
            w.write(data[i : i + 1])
            await w.drain()
            await asyncio.sleep(0)


def sse(payload: bytes) -> bytes:
    """One SSE event: ``data: <payload>`` and the blank line that ends it."""
    return b"data: " + payload + b"\n\n"


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked transfer-encoded body."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


def dumps(obj: Any) -> bytes:
    """Compact JSON, as bytes."""
    return json.dumps(obj, separators=(",", ":")).encode()


async def read_request(conn: Conn) -> Request | None:
    """Read one request (head and body, chunked or not); None when the client closed the
    connection cleanly between requests."""
    reader = conn.reader
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None  # closed between requests: the ordinary end of a kept-alive connection
        raise
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    else:
        body = await reader.readexactly(int(headers.get("content-length") or 0))
    return Request(method, target.split("?", 1)[0], version, headers, body)


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """The status line and ``headers``, in order, through the blank line that ends the head."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def reset_connection(conn: Conn) -> None:
    """Abort the connection with a TCP reset (RST), as a crashing server would."""
    sock = conn.writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.writer.transport.abort()


async def fin_after(conn: Conn, delay_s: float, grace_s: float = 0.05) -> bool:
    """End the connection as a server that closes after its response does: wait ``delay_s``,
    send FIN, then keep reading for ``grace_s`` so that a request the client had already sent
    is seen, and dropped unanswered. True when one was (any byte of it arrived)."""
    reader = conn.reader
    got = b""
    with contextlib.suppress(ConnectionError, TimeoutError, asyncio.TimeoutError):
        if delay_s > 0:
            got = await asyncio.wait_for(reader.read(1), delay_s)
    if not got and not conn.writer.is_closing():
        with contextlib.suppress(OSError):
            conn.writer.write_eof()
        with contextlib.suppress(ConnectionError, TimeoutError, asyncio.TimeoutError):
            got = await asyncio.wait_for(reader.read(1), grace_s)
    conn.writer.close()
    return bool(got)


async def hold_connection(conn: Conn) -> None:
    """Send nothing more, keep the connection open, until the client gives up on it."""
    with contextlib.suppress(ConnectionError):
        while await conn.reader.read(65536):
            pass
