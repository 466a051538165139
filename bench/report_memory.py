"""Peak memory of a long run's summary and report, computed from its requests.jsonl alone.

A run's records used to be held whole as Python objects: 100,000 requests x 256 streamed tokens
peaked at 1.77 GB. Now the analysis reads a ``RecordTable`` (a few bytes a chunk) built a block
at a time. This writes a synthetic run folder (realistic timestamps: a closed loop of
``--concurrency`` slots, TTFTs of tens to hundreds of ms, gaps around 20 ms with jitter and a
few stalls, about 1% failures, a warm-up), then measures, each in a fresh process (so no
import or cache of one step inflates the next):

- summary: ``metrics.summarize(result.load_table(run))``, written as summary.json;
- report: ``loadgen.report.write_report(run)``, what ``loadgen report`` runs.

and prints each one's peak RSS (``ru_maxrss`` in the child) and wall time.

    python bench/report_memory.py                            # 100,000 x 256, the issue's size
    python bench/report_memory.py --requests 20000 --chunks 64 --keep /tmp/run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the children import loadgen from this checkout
MS = 1_000_000
TARGET_MB = 300
TEMPLATE = "summary.template.json"


def write_run(run: Path, requests: int, chunks: int, concurrency: int, seed: int) -> int:
    """requests.jsonl of a synthetic closed-loop run, written a record at a time; its size."""
    rng = np.random.default_rng(seed)
    slots = np.full(concurrency, 10_000_000 * MS, np.int64)  # a perf_counter_ns-sized clock
    warmup = min(100, requests // 100)
    with open(run / "requests.jsonl", "wb") as fh:
        for i in range(requests):
            slot = i % concurrency
            send = int(slots[slot]) + int(rng.integers(0, 2 * MS))
            ttft = int(rng.gamma(4.0, 40 * MS))
            gaps = rng.normal(20 * MS, 3 * MS, chunks - 1).clip(2 * MS).astype(np.int64)
            stalls = rng.random(chunks - 1) < 0.002
            gaps[stalls] += rng.integers(100 * MS, 900 * MS, int(stalls.sum()))
            times = send + ttft + np.concatenate(([0], np.cumsum(gaps)))
            ok = rng.random() > 0.01
            n = chunks if ok else int(rng.integers(0, chunks))
            end = int(times[n - 1]) + 2 * MS if n else send + ttft
            rec = {
                "id": i,
                "warmup": i < warmup,
                "t_sched_ns": send - int(rng.integers(0, MS)),
                "t_send_ns": send,
                "requested_output_tokens": chunks,
                "requested_prompt_tokens": 512,
                "ok": ok,
                "error_class": None if ok else "read",
                "error_message": None if ok else "connection reset by peer",
                "http_status": 200,
                "response_id": f"cmpl-{i:08x}",
                "t_first_byte_ns": send + ttft - MS if n else None,
                "t_first_token_ns": int(times[0]) if n else None,
                "t_first_content_ns": int(times[0]) if n else None,
                "t_end_ns": end,
                "chunk_times_ns": times[:n].tolist(),
                "chunk_tokens": [1] * n,
                "prompt_tokens": 512,
                "output_tokens": n,
                "token_source": "usage",
                "prompt_tokens_source": "usage",
                "worker": 0,
                "stage": 0,
            }
            fh.write(orjson.dumps(rec) + b"\n")
            slots[slot] = end
    return (run / "requests.jsonl").stat().st_size


def child(step: str, run: Path) -> None:
    """One measured step, in this (fresh) process; prints its figures as JSON."""
    t0 = time.perf_counter()
    if step == "summary":
        from loadgen.analysis import metrics
        from loadgen.result import load_table, write_summary

        table = load_table(run)
        built = time.perf_counter() - t0
        # The measured blocks over a real run's summary (TEMPLATE): the layout every reader
        # checks has blocks (conditions, client) that only a run can fill.
        summary = json.loads((run / TEMPLATE).read_text())
        for block in ("stages", "curve", "fidelity", "capacity"):
            summary.pop(block, None)
        measured = metrics.summarize(table)
        summary.update({k: measured[k] for k in ("counts", "window", "metrics", "sla")}, run_id=run.name)
        write_summary(run, summary)
        extra = {"table_mb": table.nbytes / 1e6, "table_s": built}
    else:
        from loadgen.report import write_report

        written = write_report(run)
        extra = {"files": len(written), "html_mb": (run / "report.html").stat().st_size / 1e6}
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"step": step, "peak_rss_mb": peak_mb, "wall_s": time.perf_counter() - t0, **extra}))


def write_template(run: Path, concurrency: int) -> None:
    """TEMPLATE: the summary.json of an 8-request run on the built-in simulator, with the
    synthetic run's concurrency."""
    from loadgen.config import load_profile
    from loadgen.runner import api

    with tempfile.TemporaryDirectory(prefix="loadgen-report-memory-template-") as out:
        profile = load_profile(
            None,
            overrides={
                "load.concurrency": 4,
                "workload.num_requests": 8,
                "output.dir": out,
                "output.progress": False,
            },
        )
        res = api.run(profile)
        summary = json.loads((res.run_dir / "summary.json").read_text())
    summary["conditions"]["load"] = {**summary["conditions"]["load"], "concurrency": concurrency}
    (run / TEMPLATE).write_text(json.dumps(summary))


def measure(step: str, run: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", step, str(run)], capture_output=True, text=True, env=env
    )
    if out.returncode:
        raise SystemExit(f"{step} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--chunks", type=int, default=256, help="one-token chunks per request")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="write the run folder here and keep it")
    ap.add_argument("--child", nargs=2, metavar=("STEP", "RUN"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], Path(a.child[1]))
        return
    with tempfile.TemporaryDirectory(prefix="loadgen-report-memory-") as tmp:
        run = a.keep or Path(tmp) / "run"
        run.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        size = write_run(run, a.requests, a.chunks, a.concurrency, a.seed)
        write_template(run, a.concurrency)
        print(
            f"requests.jsonl: {a.requests:,} requests x {a.chunks} chunks = {a.requests * a.chunks:,} "
            f"chunk values, {size / 1e6:,.0f} MB, written in {time.perf_counter() - t0:.1f} s"
        )
        for step in ("summary", "report"):
            r = measure(step, run)
            more = f", table {r['table_mb']:.0f} MB built in {r['table_s']:.1f} s" if "table_mb" in r else ""
            more += f", report.html {r['html_mb']:.2f} MB" if "html_mb" in r else ""
            verdict = "ok" if r["peak_rss_mb"] < TARGET_MB else f"OVER the {TARGET_MB} MB target"
            peak, wall = r["peak_rss_mb"], r["wall_s"]
            print(f"{step:8s} peak RSS {peak:6.0f} MB ({verdict}), wall {wall:5.1f} s{more}")


if __name__ == "__main__":
    main()
