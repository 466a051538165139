"""Memory of a whole run: peak RSS of the loadgen process and of each of its workers, and how
RSS moves over a long run.

Two modes, both against a zero-delay streaming server in its own process (``peak``: the
pre-rendered one of bench/client_scaling.py, which answers 256 tokens per request; ``soak``:
the scripted test server, loadgen.testing, any length):

    python bench/run_memory.py peak [--requests 100000] [--tokens 256] [--concurrency 64] [--workers 1]
                                    [--no-report]
    python bench/run_memory.py soak [--minutes 30] [--rate 40] [--tokens 64] [--workers 1]

``peak`` runs ``loadgen run`` (with its end-of-run report, unless ``--no-report``) in a child
process and prints that process's peak RSS (getrusage: RUSAGE_SELF) and each worker
process's (VmHWM, read from /proc while it lives: RUSAGE_CHILDREN would also count the short
``git`` the summary forks, whose RSS starts as a copy of the parent's), the run's wall time
and the records written. Target: every
process under 300 MB at 100,000 requests x 256 tokens. ``soak`` runs an open-loop run of the
given duration and prints the RSS of the loadgen process and of each worker once a minute
(from /proc): flat means memory does not grow with the requests done.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadgen.testing import StreamServer

# Runs the CLI in this child and reports its own peak RSS and its children's, in MB.
_CHILD = """
import resource, sys, json
from loadgen.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RSS " + json.dumps({"code": code, "self_mb": me}), file=sys.stderr)
"""


def _cli(url: str, out: str, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-c",
        _CHILD,
        "run",
        "--url",
        url,
        "--input-tokens",
        "16",
        "--out",
        out,
        "--no-progress",
        "--set",
        "server_metrics.enabled=false",
        *extra,
    ]


def peak(a: argparse.Namespace) -> None:
    from client_scaling import TOKENS, fast_server  # the bench folder is this script's path

    if a.tokens != TOKENS:
        raise SystemExit(f"peak streams {TOKENS} tokens per request (the fast server's answer)")
    with fast_server() as (url, _pid), tempfile.TemporaryDirectory() as out:
        cmd = _cli(
            url,
            out,
            [
                "--concurrency",
                str(a.concurrency),
                "--num-requests",
                str(a.requests),
                "--output-tokens",
                str(a.tokens),
                "--workers",
                str(a.workers),
                *(["--no-report"] if a.no_report else []),
            ],
        )
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        workers: dict[int, float] = {}  # worker pid -> its peak RSS (VmHWM), read while it lives
        while proc.poll() is None:
            for pid in _children(proc.pid):
                workers[pid] = max(workers.get(pid, 0.0), _status_mb(pid, "VmHWM:") or 0.0)
            time.sleep(0.2)
        wall = time.monotonic() - t0
        stderr = proc.stderr.read() if proc.stderr else ""
        line = [x for x in stderr.splitlines() if x.startswith("RSS ")]
        if not line:
            raise SystemExit(f"the run failed:\n{stderr[-3000:]}")
        rss = json.loads(line[-1][4:])
        run_dir = next(Path(out).iterdir())
        summary = json.loads((run_dir / "summary.json").read_text())
        size_mb = (run_dir / "requests.jsonl").stat().st_size / 2**20
        print(
            f"{a.requests:,} requests x {a.tokens} tokens, c={a.concurrency}, workers={a.workers}: "
            f"exit {rss['code']}, {summary['counts']['ok']:,} ok, wall {wall:.1f} s, "
            f"{summary['metrics']['output_tokens_per_s']:,.0f} tokens/s, requests.jsonl {size_mb:,.0f} MB"
        )
        seen = ", ".join(f"{mb:.0f}" for mb in workers.values() if mb)
        kids = f"worker processes {seen} MB" if seen else "no worker process"
        print(f"peak RSS: loadgen process {rss['self_mb']:.0f} MB; {kids}")


def _status_mb(pid: int, field: str) -> float | None:
    """A memory field of /proc/PID/status (VmRSS: now, VmHWM: the peak so far) in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _rss_mb(pid: int) -> float | None:
    return _status_mb(pid, "VmRSS:")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def soak(a: argparse.Namespace) -> None:
    with StreamServer(ttft_ms=0, itl_ms=0) as srv, tempfile.TemporaryDirectory() as out:
        cmd = _cli(
            srv.url,
            out,
            [
                "--rate",
                str(a.rate),
                "--duration",
                str(a.minutes * 60),
                "--output-tokens",
                str(a.tokens),
                "--workers",
                str(a.workers),
                "--no-report",
            ],
        )
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        print(f"soak: rate {a.rate}/s x {a.tokens} tokens for {a.minutes} min, workers={a.workers}")
        print(f"{'minute':>6} {'records':>9} {'loadgen MB':>11} {'workers MB':>12}")
        t0 = time.monotonic()
        minute = 0
        while proc.poll() is None:
            time.sleep(1.0)
            if time.monotonic() - t0 < minute * 60:
                continue
            runs = list(Path(out).glob("*/requests.jsonl"))
            n = runs[0].read_bytes().count(b"\n") if runs else 0
            kids = [_rss_mb(c) for c in _children(proc.pid)]
            kid_txt = " ".join(f"{k:.0f}" for k in kids if k is not None) or "-"
            print(f"{minute:>6} {n:>9,} {_rss_mb(proc.pid) or 0:>11.0f} {kid_txt:>12}", flush=True)
            minute += 1
        err = proc.stderr.read() if proc.stderr else ""
        line = [x for x in err.splitlines() if x.startswith("RSS ")]
        if line:
            rss = json.loads(line[-1][4:])
            print(f"peak RSS: loadgen {rss['self_mb']:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("peak")
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--workers", default="1")
    p.add_argument("--no-report", action="store_true", help="the load and the summary only")
    s = sub.add_parser("soak")
    s.add_argument("--minutes", type=float, default=30)
    s.add_argument("--rate", type=float, default=40)
    s.add_argument("--tokens", type=int, default=64)
    s.add_argument("--workers", default="1")
    a = ap.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    peak(a) if a.mode == "peak" else soak(a)


if __name__ == "__main__":
    main()
