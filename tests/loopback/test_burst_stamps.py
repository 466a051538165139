"""A decode step's tokens reach many streams at once: each read keeps its own arrival stamp.

The httptools transport stamps a read when it reaches Python and parses it only once every
socket that was ready in the same turn of the event loop has been read (``_Batch``). Here a
real loopback server (its own process) holds N streams open and writes one chunk to all of
them while the client's loop is busy, so all N are ready at its next poll, and the consumer
burns ``BURN_S`` of CPU per read (a slow parse). Parsing each read before reading the next
puts the i-th stamp at least i x BURN_S after the first: a spread of at least
(N - 1) x BURN_S = 35 ms (measured 36 ms before ``_Batch``). Stamped on read, the spread is
N reads' cost (measured 0.07-0.13 ms). The bound is half the sequential floor.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import time
from collections.abc import Mapping

import pytest
import uvloop

from loadgen.backends.transports import make_transport
from loadgen.backends.transports.base import TransportOptions

N = 8
BURN_S = 0.005
SEQUENTIAL_FLOOR_S = (N - 1) * BURN_S
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class BurstServer:
    """Accepts N requests, answers each with a head, then writes one event to all N sockets
    back to back (one ``sendall`` each), then ends every stream. Its own process: a thread
    would wait for the GIL behind the consumer's burn and spread the burst itself."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.process = multiprocessing.get_context("fork").Process(target=self._serve, daemon=True)

    def _serve(self) -> None:
        conns = []
        for _ in range(N):
            c, _ = self.sock.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b""
            while b"\r\n\r\n" not in buf or len(buf.split(b"\r\n\r\n", 1)[1]) < 2:
                buf += c.recv(65536)
            c.sendall(HEAD)
            conns.append(c)
        time.sleep(0.25)  # inside the client's blocked spell (SlowConsumer.head)
        event = _chunk(b'data: {"x": 1}\n\n')
        for c in conns:
            c.sendall(event)
        time.sleep(0.5)  # the client parses the burst
        for c in conns:
            c.sendall(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        for c in conns:
            c.close()

    def __enter__(self) -> BurstServer:
        self.process.start()
        self.sock.close()  # the child has it
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()


class SlowConsumer:
    """Keeps each read's stamp; burns CPU on every read after the head, as a slow parse would.
    Once the last head is in, the client's loop is held up from 50 to 450 ms later, and the
    server writes the burst at about 250 ms: every socket is ready when the loop next polls."""

    heads = 0

    def __init__(self) -> None:
        self.stamps: list[int] = []

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        assert status == 200
        SlowConsumer.heads += 1
        if SlowConsumer.heads == N:
            asyncio.get_running_loop().call_later(0.05, time.sleep, 0.4)

    def feed(self, t_ns: int, data: bytes) -> bool:
        self.stamps.append(t_ns)
        end = time.perf_counter() + BURN_S
        while time.perf_counter() < end:
            pass
        return True


async def _burst(port: int) -> list[SlowConsumer]:
    opts = TransportOptions(
        base_url=f"http://127.0.0.1:{port}",
        headers={},
        max_connections=None,
        connect_timeout_s=5,
        read_timeout_s=10,
    )
    transport = make_transport("httptools", opts)
    SlowConsumer.heads = 0
    consumers = [SlowConsumer() for _ in range(N)]
    try:
        await asyncio.gather(*(transport.post_stream("/v1/x", b"{}", c) for c in consumers))
    finally:
        await transport.aclose()
    return consumers


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_burst_of_reads_keeps_each_reads_arrival_stamp(loop: str) -> None:
    with BurstServer() as server:
        run = uvloop.run if loop == "uvloop" else asyncio.run
        consumers = run(asyncio.wait_for(_burst(server.port), 20))
        server.process.join(5)
    assert server.process.exitcode == 0
    firsts = [c.stamps[0] for c in consumers]
    assert all(len(c.stamps) >= 2 for c in consumers)  # the burst's event, then the end
    spread_s = (max(firsts) - min(firsts)) / 1e9
    assert spread_s < SEQUENTIAL_FLOOR_S / 2, f"stamps spread {spread_s * 1e3:.1f} ms over the burst"
