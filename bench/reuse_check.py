"""The cost of checking a kept-alive connection before reusing it, per request.

Every transport asks ``ConnLife.reusable`` (the server's Keep-Alive word) and ``eof_pending``
(one ``poll`` with no wait on the socket) before it hands out an idle connection. This times
exactly that pair on a real idle loopback connection (an asyncio transport's socket, as the
httptools transport sees it, on uvloop and on asyncio), against a bare ``get_extra_info`` in the
same run, so the ratio and the difference survive a noisy machine. The per-token cost of the
transports as a whole is ``bench/client_overhead.py``'s (run it before and after a change).

    python bench/reuse_check.py [--calls 200000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import uvloop

from loadgen.backends.transports.base import ConnLife, eof_pending
from loadgen.clock import now_ns


async def measure(calls: int) -> tuple[float, float]:
    """(ns per check, ns per bare get_extra_info) on one idle connection to a local server."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await asyncio.get_running_loop().create_connection(asyncio.Protocol, "127.0.0.1", port)
    life = ConnLife()
    life.sent, life.idle_since_ns = 1, now_ns()
    life.answered({"keep-alive": "timeout=5, max=100"}, True)
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        transport.get_extra_info("socket")
    bare = (time.perf_counter_ns() - t0) / calls
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        if not (life.reusable(now_ns()) and not eof_pending(transport.get_extra_info("socket"))):
            raise AssertionError("an idle, open connection must be reusable")
    check = (time.perf_counter_ns() - t0) / calls
    transport.close()
    server.close()
    return check, bare


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    for name, run in (("uvloop", uvloop.run), ("asyncio", asyncio.run)):
        rows = [run(measure(a.calls)) for _ in range(a.repeats)]
        check = statistics.median(r[0] for r in rows)
        bare = statistics.median(r[1] for r in rows)
        print(
            f"{name:<8} reuse check {check / 1e3:.2f} us/request (get_extra_info alone {bare / 1e3:.2f} us; "
            f"median of {a.repeats} x {a.calls:,})"
        )


if __name__ == "__main__":
    main()
