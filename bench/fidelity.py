"""Timestamp fidelity: how late loadgen's first-token timestamp trails the server's send.

Against the scripted test server (``loadgen.testing.StreamServer``, its own process, logging on
the same monotonic clock the instant before it writes each event), per request:

    trail = client first-token perf_counter_ns - server first_token_ns     (and the same per chunk)

The floor is a bare asyncio socket client (the *reference*: one keep-alive HTTP/1.1 connection
per slot, a raw POST, ``read()`` the socket, stamp, find the first content event in the raw
chunked bytes). The reference and loadgen run alternately against the same server, the log
cleared between runs, and the table gives loadgen's excess over the reference (median over
repeats). Target: within 0.1 ms of the reference at p50 and 0.5 ms at p99.

    python bench/fidelity.py                         # c=8, 200 requests, every transport, uvloop
    python bench/fidelity.py --transports aiohttp --loop asyncio --repeats 5
    python bench/fidelity.py --sweep                 # loadgen only at c=1, 64, 256: TTFT error too
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import tempfile
import time
import typing
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np
import orjson

from loadgen.backends.transports import TRANSPORTS
from loadgen.config import load_profile
from loadgen.runner import api
from loadgen.testing import StreamServer

TARGET_P50_MS = 0.1
TARGET_P99_MS = 0.5
MS = 1e6


def all_transports() -> list[str]:
    """Every value ``target.transport`` accepts (the one list of transports), so a new
    transport is benched without edits."""
    return list(TRANSPORTS)


def run_loop(coro: typing.Awaitable, loop: str) -> typing.Any:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


# ----------------------------------------------------------------------------- the reference
@dataclass
class Observed:
    """One request as a client saw it: the server's response id and its read timestamps."""

    response_id: str
    t_send_ns: int
    chunk_times_ns: list[int] = field(default_factory=list)

    @property
    def t_first_token_ns(self) -> int:
        return self.chunk_times_ns[0]


class _Chunked:
    """Minimal HTTP/1.1 chunked-transfer decoder: raw bytes in, payload bytes out, end flag."""

    def __init__(self) -> None:
        self.buf = b""
        self.left = 0  # payload bytes still due in the current chunk
        self.crlf = 0  # bytes of the CRLF that closes the current chunk still due
        self.last = False  # the zero-size chunk was seen; waiting for the final CRLF
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = []
        while not self.done:
            if self.left:
                take = self.buf[: self.left]
                out.append(take)
                self.buf = self.buf[len(take) :]
                self.left -= len(take)
                if self.left:
                    break
                self.crlf = 2
            if self.crlf:
                n = min(self.crlf, len(self.buf))
                self.buf = self.buf[n:]
                self.crlf -= n
                if self.crlf:
                    break
            if self.last:
                # No trailers: "0\r\n\r\n". With trailers: they end with an empty line.
                if self.buf.startswith(b"\r\n") or b"\r\n\r\n" in self.buf:
                    self.done = True
                break
            i = self.buf.find(b"\r\n")
            if i < 0:
                break
            size = int(self.buf[:i].split(b";", 1)[0], 16)
            self.buf = self.buf[i + 2 :]
            if size == 0:
                self.last = True
            else:
                self.left = size
        return b"".join(out)


async def _ref_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, req: bytes) -> Observed:
    t_send = time.perf_counter_ns()
    writer.write(req)
    head = b""
    in_body = False
    body = _Chunked()
    sse = b""
    obs = Observed("", t_send)
    saw_done = False
    while True:
        data = await reader.read(65536)
        t = time.perf_counter_ns()  # stamped on the read, before any parsing
        if not data:
            raise ConnectionError("server closed the connection mid-response")
        if not in_body:
            head += data
            i = head.find(b"\r\n\r\n")
            if i < 0:
                continue
            status_line, *lines = head[:i].split(b"\r\n")
            if b" 200 " not in status_line + b" ":
                raise RuntimeError(f"HTTP error: {status_line!r}")
            if not any(ln.lower().replace(b" ", b"") == b"transfer-encoding:chunked" for ln in lines):
                raise RuntimeError("the reference client only reads chunked responses")
            data, head, in_body = head[i + 4 :], b"", True
        sse += body.feed(data)
        while (j := sse.find(b"\n\n")) >= 0:
            event, sse = sse[:j], sse[j + 2 :]
            if not event.startswith(b"data: "):
                continue
            payload = event[6:]
            if payload == b"[DONE]":
                saw_done = True
                continue
            obj = orjson.loads(payload)
            obs.response_id = obs.response_id or obj.get("id", "")
            choices = obj.get("choices")
            if choices and (choices[0].get("delta") or {}).get("content"):
                obs.chunk_times_ns.append(t)
        if body.done:
            if not saw_done:
                raise RuntimeError("response ended without data: [DONE]")
            return obs


async def reference_run(
    url: str, model: str, n: int, conc: int, input_tokens: int, output_tokens: int
) -> list[Observed]:
    """The floor: ``conc`` raw keep-alive connections, closed loop, ``n`` requests in all."""
    u = urlsplit(url)
    host, port = u.hostname, u.port
    body = orjson.dumps(
        {
            "model": model,
            "max_tokens": output_tokens,
            "stream": True,
            "messages": [{"role": "user", "content": " ".join(["hello"] * input_tokens)}],
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
    )
    req = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Accept-Encoding: identity\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    ids = iter(range(n))
    out: list[Observed] = []

    async def slot() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for _ in ids:
                out.append(await _ref_request(reader, writer, req))
        finally:
            writer.close()
            await writer.wait_closed()

    await asyncio.gather(*(slot() for _ in range(conc)))
    return out


# ----------------------------------------------------------------------------- loadgen
def loadgen_run(
    url: str,
    transport: str,
    loop: str,
    n: int,
    conc: int,
    input_tokens: int,
    output_tokens: int,
    out_dir: str,
    workers: int = 1,
) -> tuple[list[Observed], dict, list]:
    p = load_profile(
        None,
        overrides={
            "target.url": url,
            "target.transport": transport,
            "load.concurrency": conc,
            "load.warmup_requests": 0,
            "workload.num_requests": n,
            "workload.input_tokens": input_tokens,
            "workload.output_tokens": output_tokens,
            "output.dir": out_dir,
            "output.progress": False,
            "client.workers": workers,
        },
    )
    res = run_loop(api.run_async(p), loop)
    if res.summary["counts"]["ok"] != n:
        raise RuntimeError(f"loadgen/{transport}: {res.summary['counts']}")
    obs = [Observed(r.response_id, r.t_send_ns, list(r.chunk_times_ns)) for r in res.records]
    return obs, res.summary, res.records


# ----------------------------------------------------------------------------- matching
def trails(observed: list[Observed], log: dict[str, dict]) -> tuple[np.ndarray, np.ndarray]:
    """(first-token trail per request, trail of every chunk), in ms, matched by response id."""
    first, chunks = [], []
    for o in observed:
        gt = log[o.response_id]
        if len(o.chunk_times_ns) != len(gt["chunk_ns"]):
            raise RuntimeError(
                f"{o.response_id}: {len(o.chunk_times_ns)} chunks seen, server sent {len(gt['chunk_ns'])}"
            )
        first.append(o.t_first_token_ns - gt["first_token_ns"])
        chunks.extend(np.array(o.chunk_times_ns) - np.array(gt["chunk_ns"]))
    return np.array(first) / MS, np.array(chunks) / MS


def stats(x: np.ndarray) -> tuple[float, float, float]:
    return float(np.percentile(x, 50)), float(np.percentile(x, 99)), float(np.max(x))


def fmt3(t: tuple[float, ...]) -> str:
    return " ".join(f"{v:8.3f}" for v in t)


# ----------------------------------------------------------------------------- modes
def fidelity(a: argparse.Namespace) -> None:
    transports = a.transports
    clients = ["reference"] + [f"loadgen/{t}" for t in transports]
    rows: dict[str, list] = {c: [] for c in clients}
    with StreamServer(ttft_ms=a.ttft_ms, itl_ms=a.itl_ms) as srv, tempfile.TemporaryDirectory() as out:
        model = "test-model"
        warm = max(2 * a.concurrency, 16)

        def ref(n: int) -> list[Observed]:
            return run_loop(
                reference_run(srv.url, model, n, a.concurrency, a.input_tokens, a.output_tokens), a.loop
            )

        # Warm-up (discarded): imports, server code paths, the kernel's socket buffers.
        ref(warm)
        for t in transports:
            loadgen_run(
                srv.url, t, a.loop, warm, a.concurrency, a.input_tokens, a.output_tokens, out, a.workers
            )
        for _ in range(a.repeats):
            for c in clients:
                srv.clear_log()
                if c == "reference":
                    obs = ref(a.requests)
                else:
                    obs = loadgen_run(
                        srv.url,
                        c.split("/", 1)[1],
                        a.loop,
                        a.requests,
                        a.concurrency,
                        a.input_tokens,
                        a.output_tokens,
                        out,
                        a.workers,
                    )[0]
                ft, ch = trails(obs, srv.log())
                rows[c].append((stats(ft), stats(ch), float(min(ch.min(), ft.min()))))

    print(
        f"fidelity: StreamServer ttft {a.ttft_ms:g} ms, itl {a.itl_ms:g} ms, concurrency "
        f"{a.concurrency}, {a.requests} requests x {a.output_tokens} tokens, loop {a.loop}, "
        f"loadgen workers {a.workers}, "
        f"{a.repeats} repeats (reference and loadgen alternating)"
    )
    print("trail = client read timestamp - server send timestamp, ms")
    print(
        f"{'client':<18}{'rep':>4} | {'first-token p50':>15} {'p99':>8} {'max':>8} | "
        f"{'all-chunk p50':>13} {'p99':>8} {'max':>8} | {'min':>7}"
    )
    for c in clients:
        for i, (ft, ch, mn) in enumerate(rows[c]):
            print(
                f"{c:<18}{i + 1:>4} | {ft[0]:15.3f} {ft[1]:8.3f} {ft[2]:8.3f} | "
                f"{ch[0]:13.3f} {ch[1]:8.3f} {ch[2]:8.3f} | {mn:7.3f}"
            )
    print()
    print(
        f"loadgen's excess over the reference (per repeat, then the median over repeats); "
        f"target p50 <= {TARGET_P50_MS} ms, p99 <= {TARGET_P99_MS} ms"
    )
    print(f"{'client':<18} | {'first-token p50':>15} {'p99':>8} | {'all-chunk p50':>13} {'p99':>8} | verdict")
    for c in clients[1:]:
        d = [
            [mine[k][q] - base[k][q] for k in (0, 1) for q in (0, 1)]
            for mine, base in zip(rows[c], rows["reference"])
        ]
        med = [statistics.median(x[j] for x in d) for j in range(4)]
        p50_ok, p99_ok = med[0] <= TARGET_P50_MS, med[1] <= TARGET_P99_MS
        verdict = f"p50 {'PASS' if p50_ok else 'MISS'}, p99 {'PASS' if p99_ok else 'MISS'}"
        print(f"{c:<18} | {med[0]:+15.3f} {med[1]:+8.3f} | {med[2]:+13.3f} {med[3]:+8.3f} | {verdict}")


def sweep(a: argparse.Namespace) -> None:
    print(
        f"sweep: loadgen only, StreamServer ttft {a.ttft_ms:g} ms, itl {a.itl_ms:g} ms, "
        f"64 output tokens, 2 x concurrency requests (min 50), loop {a.loop}"
    )
    print(
        "TTFT error = client TTFT (first token - send) - server TTFT (first token sent - request "
        "received); chunk trail = client read - server send; ms"
    )
    print(
        f"{'transport':<10}{'conc':>5}{'reqs':>6} | {'TTFT err p50':>12} {'p99':>8} {'max':>8} | "
        f"{'chunk trail p50':>15} {'p99':>8} {'max':>8} | {'cpu busy':>8} {'loop lag p99':>12}"
    )
    with StreamServer(ttft_ms=a.ttft_ms, itl_ms=a.itl_ms) as srv, tempfile.TemporaryDirectory() as out:
        for t in a.transports:
            loadgen_run(srv.url, t, a.loop, 16, 8, a.input_tokens, 16, out)  # warm-up
        for conc in (1, 64, 256):
            n = max(50, 2 * conc)
            for t in a.transports:
                srv.clear_log()
                _obs, summary, records = loadgen_run(srv.url, t, a.loop, n, conc, a.input_tokens, 64, out)
                log = srv.log()
                ttft_err = np.array(
                    [
                        (
                            (r.t_first_token_ns - r.t_send_ns)
                            - (log[r.response_id]["first_token_ns"] - log[r.response_id]["recv_ns"])
                        )
                        / MS
                        for r in records
                    ]
                )
                _ft, ch = trails(_obs, log)
                client = summary["client"]
                lag = client["event_loop_lag_ms"]["p99"]
                print(
                    f"{t:<10}{conc:>5}{n:>6} | {fmt3(stats(ttft_err)):>30} | "
                    f"{fmt3(stats(ch)):>33} | {client['cpu_busy_fraction']:8.2f} "
                    f"{(lag if lag is not None else float('nan')):12.3f}"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--transports",
        default=",".join(all_transports()),
        help="comma-separated loadgen transports (default: every target.transport value)",
    )
    ap.add_argument(
        "--loop", choices=["uvloop", "asyncio"], default="uvloop", help="event loop for both clients"
    )
    ap.add_argument("--repeats", type=int, default=3, help="alternating reference/loadgen rounds")
    ap.add_argument("--concurrency", type=int, default=8, help="closed-loop slots")
    ap.add_argument("--workers", type=int, default=1, help="loadgen worker processes (fidelity mode)")
    ap.add_argument("--requests", type=int, default=200, help="requests per run")
    ap.add_argument("--ttft-ms", type=float, default=50.0, help="server delay to the first token")
    ap.add_argument("--itl-ms", type=float, default=10.0, help="server delay between tokens")
    ap.add_argument("--input-tokens", type=int, default=32, help="prompt length (words)")
    ap.add_argument("--output-tokens", type=int, default=16, help="tokens per response")
    ap.add_argument(
        "--sweep",
        action="store_true",
        help="loadgen only at concurrency 1, 64, 256: TTFT error, chunk trail, client health",
    )
    a = ap.parse_args()
    a.transports = [t for t in a.transports.split(",") if t]
    unknown = set(a.transports) - set(all_transports())
    if unknown:
        ap.error(f"unknown transport(s) {sorted(unknown)}; valid: {all_transports()}")
    (sweep if a.sweep else fidelity)(a)


if __name__ == "__main__":
    main()
