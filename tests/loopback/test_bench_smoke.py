"""Every benchmark under ``bench/`` still runs, at a size that takes seconds: the figures in
the notes come from these scripts, run by hand, and one that no test ran broke silently
(``report_memory.py`` no longer matched the summary's layout). Nothing here is timed: each run
must exit 0 and print the line its figures are read from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

# (script and tiny arguments, a piece of the line its figures are read from)
RUNS = [
    ("client_overhead.py --requests 16 --concurrency 4 --repeats 1", "of httptools/uvloop"),
    ("live_view_cost.py --requests 16 --concurrency 4 --repeats 1", "dashboard+prometheus"),
    ("reuse_check.py --calls 1000 --repeats 1", "reuse check"),
    ("sim_throughput.py --seconds 1 --concurrency 8", "server generated"),
    ("report_memory.py --requests 200 --chunks 8 --concurrency 8", "report.html"),
    ("run_memory.py peak --requests 200 --concurrency 8", "peak RSS: loadgen process"),
    ("run_memory.py soak --minutes 0.05 --rate 5 --tokens 8", "peak RSS: loadgen"),
    ("client_scaling.py --workers 1 --requests 32 --concurrency 4 --repeats 1", "client us/token"),
    ("fidelity.py --repeats 1 --requests 16", "loadgen/httptools"),
    ("capacity_virtual.py --truth 32.7 --seeds 1 --max-stages 3", "confirmed within 0.90-1.00 x truth:"),
    ("record_store.py --requests 200 --tokens 16", "records.parquet, 1 us (columnar)"),
]


def test_every_benchmark_is_exercised():
    """A new script under bench/ gets a row above."""
    assert {cmd.split()[0] for cmd, _ in RUNS} == {p.name for p in BENCH.glob("*.py")}


@pytest.mark.slow
@pytest.mark.parametrize("cmd,expect", RUNS, ids=[" ".join(c.split()[:2]) for c, _ in RUNS])
def test_the_benchmark_runs(cmd, expect, tmp_path):
    script, *args = cmd.split()
    res = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert expect in res.stdout, res.stdout[-2000:]
