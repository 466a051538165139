"""Client scaling: streamed tokens/s and client CPU per token for 1, 2, ... worker processes.

A zero-delay streaming server in its own process is driven at one concurrency by loadgen with
1, 2, ... workers, alternating the worker counts over repeats so their ratio survives a noisy
machine. Per row: tokens/s over the run's window, client CPU per token (the parent and every worker, from the
summary's client block), the parent's own share, and the server's CPU per token (from /proc),
so a reader sees whether the server, not the client, was the limit. Target on a 2-core machine:
2 workers give >= 1.6x the tokens/s of one where the server is not the bottleneck.

The default server (``--server fast``, below) answers each request with one write of a
pre-rendered response (256 one-token SSE events, chunked), so it costs well under a microsecond
per token and the client is what is measured; ``--server scripted`` uses the test server
(loadgen.testing, one write per event), which costs more per token than the client does.

    python bench/client_scaling.py [--workers 1,2] [--requests 800] [--concurrency 64] [--repeats 3]

The fidelity half (``bench/fidelity.py --workers 2``) checks that splitting the load adds no
timestamp error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from loadgen.config import load_profile
from loadgen.runner import api
from loadgen.testing import StreamServer

TOKENS = 256


def _response() -> bytes:
    """The whole streamed answer, rendered once: HTTP head, chunked SSE events, [DONE]."""
    events = [
        b'data: {"id":"fast","object":"chat.completion.chunk","model":"fast","choices":[{"index":0,'
        b'"delta":{"content":" tok"},"finish_reason":null}]}\n\n'
    ] * TOKENS
    events.append(
        b'data: {"id":"fast","object":"chat.completion.chunk","model":"fast","choices":[{"index":0,'
        b'"delta":{},"finish_reason":"length"}]}\n\n'
    )
    events.append(b"data: [DONE]\n\n")
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + body


class _Fast(asyncio.Protocol):
    STREAM = _response()
    MODELS_BODY = json.dumps({"object": "list", "data": [{"id": "fast", "object": "model"}]}).encode()
    MODELS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(MODELS_BODY),
        MODELS_BODY,
    )
    NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            length = 0
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            if head.startswith(b"post"):
                self.t.write(self.STREAM)  # type: ignore[attr-defined]
            elif head.startswith(b"get /v1/models"):
                self.t.write(self.MODELS)  # type: ignore[attr-defined]
            else:
                self.t.write(self.NOT_FOUND)  # type: ignore[attr-defined]


def serve_fast(port: int) -> None:
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Fast, "127.0.0.1", port, backlog=1024)
        print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
        await server.serve_forever()

    uvloop.run(main())


@contextlib.contextmanager
def fast_server() -> Iterator[tuple[str, int]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        json.loads(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def scripted_server() -> Iterator[tuple[str, int]]:
    with StreamServer(ttft_ms=0, itl_ms=0) as srv:
        assert srv.proc is not None
        yield srv.url, srv.proc.pid


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, clock ticks


def one_run(url: str, workers: int, n: int, conc: int, out: str) -> dict[str, float]:
    p = load_profile(
        None,
        overrides={
            "target.url": url,
            "load.concurrency": conc,
            "workload.num_requests": n,
            "workload.input_tokens": 16,
            "workload.output_tokens": TOKENS,
            "client.workers": workers,
            "server_metrics.enabled": False,
            "output.dir": out,
            "output.progress": False,
        },
    )
    import uvloop

    res = uvloop.run(api.run_async(p))
    s = res.summary
    assert s["counts"]["ok"] == n, s["counts"]
    tokens = n * TOKENS
    client = s["client"]
    parent = client.get("parent_cpu_seconds", client["cpu_seconds"])
    return {
        "tokens_per_s": s["metrics"]["output_tokens_per_s"],
        "cpu_us_per_token": client["cpu_seconds"] / tokens * 1e6,
        "parent_us_per_token": parent / tokens * 1e6,
        "window_s": s["window"]["seconds"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--server", choices=["fast", "scripted"], default="fast")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # internal: run the fast server
    a = ap.parse_args()
    if a.serve is not None:
        serve_fast(a.serve)
        return
    counts = [int(x) for x in a.workers.split(",")]
    rows: dict[int, list[dict[str, float]]] = {k: [] for k in counts}
    server = fast_server() if a.server == "fast" else scripted_server()
    with server as (url, pid), tempfile.TemporaryDirectory() as out:
        one_run(url, 1, 64, a.concurrency, out)  # warm the server up
        for _ in range(a.repeats):
            for k in counts:
                cpu0 = _cpu_s(pid)
                row = one_run(url, k, a.requests, a.concurrency, out)
                row["server_us_per_token"] = (_cpu_s(pid) - cpu0) / (a.requests * TOKENS) * 1e6
                rows[k].append(row)
    print(
        f"{a.requests} requests x {TOKENS} tokens at concurrency {a.concurrency}, {a.server} server, "
        f"{a.repeats} repeats (median), {len(os.sched_getaffinity(0))} usable cores"
    )
    print(
        f"{'workers':>7} {'tokens/s':>10} {'x of 1':>7} {'client us/token':>16} "
        f"{'parent us/token':>16} {'server us/token':>16}"
    )
    base = statistics.median(r["tokens_per_s"] for r in rows[counts[0]])
    for k in counts:
        med = {key: statistics.median(r[key] for r in rows[k]) for key in rows[k][0]}
        print(
            f"{k:>7} {med['tokens_per_s']:>10,.0f} {med['tokens_per_s'] / base:>7.2f} "
            f"{med['cpu_us_per_token']:>16.2f} {med['parent_us_per_token']:>16.2f} "
            f"{med['server_us_per_token']:>16.2f}"
        )


if __name__ == "__main__":
    main()
