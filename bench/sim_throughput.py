"""How many streamed tokens/s can the simulator serve from its one core?

Starts the simulator as a subprocess (``SimProcess``) and drives it from this process with a
deliberately thin client: raw asyncio sockets, one connection per request, counting SSE events
(``\\n\\n``) without parsing them. With ``--time-scale 0`` (the default) the simulator does not
pace at all, so the figure is the server's CPU ceiling: the most tokens/s it can write. With a
real time scale it shows whether the simulator keeps up with the GPU it simulates
(``loadgen_sim_pacing_lag_seconds_total`` stays near 0 when it does).

    python bench/sim_throughput.py                       # ceiling, 256 streams, 10 s
    python bench/sim_throughput.py --time-scale 1 --concurrency 256 --preset llama3-8b-fp8@h100

Pin the server to one core for a clean figure: the script does it with os.sched_setaffinity
when the machine has two or more cores (server on core 0, this client on core 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from loadgen.sim import SimConfig, SimProcess


async def stream_forever(host: str, port: int, body: bytes, stop: float, counts: list[int]) -> None:
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    while time.perf_counter() < stop:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head)
        prev = b""
        while data := await reader.read(1 << 16):
            counts[0] += (prev + data).count(b"\n\n")  # one SSE event each (+1 for [DONE])
            prev = data[-1:]
            if time.perf_counter() >= stop:
                break
        counts[1] += 1
        writer.close()


def scrape(url: str, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics") as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def drive(url: str, concurrency: int, seconds: float, max_tokens: int) -> tuple[float, float]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = orjson.dumps({"prompt": [1] * 16, "max_tokens": max_tokens, "ignore_eos": True, "stream": True})
    warm = time.perf_counter() + 1.0  # let every stream get going, then measure
    counts = [0, 0]
    stop = warm + seconds
    tasks = [
        asyncio.create_task(stream_forever(host, int(port), body, stop, counts)) for _ in range(concurrency)
    ]
    await asyncio.sleep(warm - time.perf_counter())
    c0, g0, t0 = counts[0], scrape(url, "vllm:generation_tokens_total"), time.perf_counter()
    await asyncio.sleep(stop - time.perf_counter())
    c1, g1, t1 = counts[0], scrape(url, "vllm:generation_tokens_total"), time.perf_counter()
    await asyncio.gather(*tasks, return_exceptions=True)
    return (c1 - c0) / (t1 - t0), (g1 - g0) / (t1 - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama3-8b-fp16@h100")
    ap.add_argument("--time-scale", type=float, default=0.0, help="0: no pacing (the CPU ceiling)")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=2000)
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    config = SimConfig(
        preset=args.preset, time_scale=args.time_scale, max_num_seqs=max(256, args.concurrency)
    )
    with SimProcess(config) as sim:
        if len(cores) >= 2:
            os.sched_setaffinity(sim._proc.pid, {cores[0]})
            os.sched_setaffinity(0, {cores[1]})
        client_rate, server_rate = asyncio.run(
            drive(sim.url, args.concurrency, args.seconds, args.max_tokens)
        )
        lag = scrape(sim.url, "loadgen_sim_pacing_lag_seconds_total")
    print(
        f"preset={args.preset} time_scale={args.time_scale} concurrency={args.concurrency} "
        f"window={args.seconds:.0f}s"
    )
    print(f"server generated  {server_rate:10,.0f} tokens/s")
    print(f"client received   {client_rate:10,.0f} events/s (tokens + one [DONE] per request)")
    if args.time_scale > 0:
        print(f"pacing lag        {lag:10.3f} s total (0 = the simulator kept up with its GPU)")


if __name__ == "__main__":
    main()
