"""Client CPU cost per streamed token: how much loadgen itself spends to measure a stream.

A zero-delay streaming server (loadgen.testing, in its own process) answers every request with
256 one-token SSE events as fast as it can; loadgen drives it at concurrency 64. The figure is
the client process's CPU time during the load divided by the tokens it received. Transports
(and event loops) are measured alternately in the same run, so their ratio survives a noisy
machine. Peers on this kind of machine: vLLM's bench client 9.4 us/token, others 36-78.

A variant may name a records sink as a third part: ``httptools/uvloop/buffered`` writes
requests.jsonl through a 64 KB buffer flushed every 64 records (what loadgen did before each
record became one write as it finishes), to price per-record durability in the same run:

    python bench/client_overhead.py [--requests 512] [--repeats 3]
    python bench/client_overhead.py --variants httptools/uvloop,httptools/uvloop/buffered
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile

from loadgen.config import load_profile
from loadgen.records import JsonlSink, RequestRecord
from loadgen.runner import api, execute
from loadgen.testing import StreamServer


class BufferedSink(JsonlSink):
    """The old sink, for comparison: a 64 KB buffer flushed every 64 records (a kill -9 lost up
    to the last 64 finished records)."""

    def __init__(self, path, on_error=None) -> None:
        super().__init__(path, on_error)
        self._fh = open(self._fd, "ab", buffering=1 << 16, closefd=False)

    def write(self, record: RequestRecord) -> None:
        self._fh.write(record.to_json() + b"\n")
        self.count += 1
        if self.count % 64 == 0:
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()
        super().close()


SINKS = {"per-record": JsonlSink, "buffered": BufferedSink}


def one_run(
    url: str, transport: str, loop: str, n: int, conc: int, out: str, sink: str = "per-record"
) -> tuple[float, float]:
    execute.JsonlSink = SINKS[sink]  # the bench swaps the sink class the run writes through
    p = load_profile(
        None,
        overrides={
            "target.url": url,
            "target.transport": transport,
            "load.concurrency": conc,
            "workload.num_requests": n,
            "workload.input_tokens": 16,
            "workload.output_tokens": 256,
            "output.dir": out,
            "output.progress": False,
        },
    )
    coro = api.run_async(p)
    if loop == "uvloop":
        import uvloop

        res = uvloop.run(coro)
    else:
        res = asyncio.run(coro)
    s = res.summary
    tokens = sum(r.output_tokens or 0 for r in res.records)
    assert s["counts"]["ok"] == n, s["counts"]
    return s["client"]["cpu_seconds"] / tokens * 1e6, s["metrics"]["output_tokens_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--variants", default="httptools/uvloop,aiohttp/uvloop,httpx/uvloop,httptools/asyncio,aiohttp/asyncio"
    )
    a = ap.parse_args()
    variants = [tuple(v.split("/")) for v in a.variants.split(",")]
    results: dict[tuple, list] = {v: [] for v in variants}
    with StreamServer(ttft_ms=0, itl_ms=0, role_first=True) as srv, tempfile.TemporaryDirectory() as out:
        one_run(srv.url, "aiohttp", "asyncio", 64, a.concurrency, out)  # warm the server up
        for _ in range(a.repeats):
            for v in variants:
                srv.clear_log()
                transport, loop, *sink = v
                results[v].append(one_run(srv.url, transport, loop, a.requests, a.concurrency, out, *sink))
    print(f"{a.requests} requests x 256 tokens, concurrency {a.concurrency}, {a.repeats} repeats (median)")
    print(f"{'transport/loop[/sink]':<26} {'CPU us/token':>12} {'tokens/s':>10}")
    base = statistics.median(x[0] for x in results[variants[0]])
    for v, xs in results.items():
        us = statistics.median(x[0] for x in xs)
        tps = statistics.median(x[1] for x in xs)
        print(f"{'/'.join(v):<26} {us:>12.2f} {tps:>10,.0f}   x{us / base:.2f} of {'/'.join(variants[0])}")


if __name__ == "__main__":
    main()
