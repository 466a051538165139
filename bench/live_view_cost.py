"""What watching a run costs the client: CPU per streamed token with no live view, with the
dashboard, and with the dashboard and the Prometheus exporter, measured alternately in one run.

The setting is bench/client_overhead.py's (a zero-delay scripted server in its own process, 256
one-token events a request, concurrency 64, httptools on uvloop); the dashboard renders to a
null console at its real rate (the run's progress ticker, redrawing twice a second), so what is
measured is its work, not a terminal's. The figure is the run's own ``client.cpu_seconds`` over
the tokens it received, so the dashboard's redraws and the exporter's per-record updates (both
on the event loop that measures) are in it.

    python bench/live_view_cost.py [--requests 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile

from rich.console import Console

from loadgen.cli.dashboard import Dashboard
from loadgen.clock import run_loop
from loadgen.config import load_profile
from loadgen.live.exporters import PrometheusExporter
from loadgen.live.stats import LiveStats
from loadgen.runner import api
from loadgen.testing import StreamServer

VIEWS = ("none", "dashboard", "dashboard+prometheus")


def one_run(url: str, view: str, n: int, conc: int, out: str) -> tuple[float, float]:
    p = load_profile(
        None,
        overrides={
            "target.url": url,
            "load.concurrency": conc,
            "workload.num_requests": n,
            "workload.input_tokens": 16,
            "workload.output_tokens": 256,
            "output.dir": out,
            "output.progress": False,
        },
    )
    watch = LiveStats() if view != "none" else None
    exporter = PrometheusExporter(watch, 0) if watch is not None and "prometheus" in view else None
    board = None
    if watch is not None:
        board = Dashboard(watch, "bench", Console(file=io.StringIO(), force_terminal=True, width=100))
        board.__enter__()
    try:
        res = run_loop(api.run_async(p, watch=watch, on_progress=board.update if board else None))
    finally:
        if board is not None:
            board.__exit__(None, None, None)
        if exporter is not None:
            exporter.close()
    tokens = sum(r.output_tokens or 0 for r in res.records)
    assert res.summary["counts"]["ok"] == n, res.summary["counts"]
    return res.summary["client"]["cpu_seconds"] / tokens * 1e6, res.summary["metrics"]["output_tokens_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in VIEWS}
    with StreamServer(ttft_ms=0, itl_ms=0, role_first=True) as srv, tempfile.TemporaryDirectory() as out:
        one_run(srv.url, "none", 64, a.concurrency, out)  # warm the server up
        for _ in range(a.repeats):
            for v in VIEWS:
                srv.clear_log()
                results[v].append(one_run(srv.url, v, a.requests, a.concurrency, out))
    print(f"{a.requests} requests x 256 tokens, concurrency {a.concurrency}, {a.repeats} repeats (median)")
    print(f"{'live view':<24} {'CPU us/token':>12} {'tokens/s':>10}")
    base = statistics.median(x[0] for x in results["none"])
    for v, xs in results.items():
        us = statistics.median(x[0] for x in xs)
        tps = statistics.median(x[1] for x in xs)
        print(f"{v:<24} {us:>12.2f} {tps:>10,.0f}   x{us / base:.3f} of none")


if __name__ == "__main__":
    main()
