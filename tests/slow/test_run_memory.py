"""A run's memory does not grow with its requests beyond a few bytes per stored value.

A whole run (load, records to requests.jsonl, the summary read back from the file) is traced
with tracemalloc at two sizes; the growth of its peak per extra request must stay under what
compact columns cost (2.5 KB per request of 64 streamed tokens: 64 chunk deltas and token counts,
~30 scalar columns and their transient copies). Keeping every RequestRecord in memory, as
loadgen did before, costs about 6 KB per such request (two 64-element lists of Python ints and
the dataclass) before the summary's own copies, and fails this test. The 100,000-request
figure lives in bench/run_memory.py.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import tracemalloc

from loadgen.runner import api
from loadgen.testing import StreamServer

PER_REQUEST_LIMIT = 2_500  # bytes of peak growth per request of 64 tokens


def traced_peak(make_profile, url: str, n: int, tag: str) -> int:
    profile = make_profile(
        url,
        load__concurrency=16,
        workload__num_requests=n,
        workload__output_tokens=64,
        output__run_id=tag,
        server_metrics__enabled=False,
    )
    gc.collect()
    tracemalloc.start()
    try:
        res = asyncio.run(api.run_async(profile))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.summary["counts"]["ok"] == n
    return peak


def test_peak_memory_per_request_is_a_small_constant(make_profile):
    with StreamServer(ttft_ms=0, itl_ms=0) as srv:
        traced_peak(make_profile, srv.url, 50, "warm")  # imports and first-use caches
        small = traced_peak(make_profile, srv.url, 300, "small")
        large = traced_peak(make_profile, srv.url, 1500, "large")
    per_request = (large - small) / 1200
    assert per_request < PER_REQUEST_LIMIT, f"{per_request:.0f} bytes per request"


def test_a_run_and_its_summary_never_import_pandas(tmp_path):
    """pandas (with the pyarrow it loads) is 77 MB of RSS here: the load and the summary work
    on numpy columns, so a run without its report must not import it. Only the report's last
    phase does (the request frame and its CSV/Parquet), after the chunk columns are freed.
    A fresh interpreter, since this test process has imported pandas long ago."""
    code = (
        "import sys\n"
        "from loadgen.cli.main import main\n"
        f"args = ['run', '--concurrency', '4', '--num-requests', '20', '--out', {str(tmp_path)!r}]\n"
        "code = main(args + ['--no-report', '--no-progress'])\n"
        "heavy = sorted(m for m in ('pandas', 'pyarrow', 'matplotlib') if m in sys.modules)\n"
        "print('HEAVY', code, ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = [x for x in out.stdout.splitlines() if x.startswith("HEAVY")]
    assert line, out.stderr[-2000:]
    assert line[-1].split(" ", 2)[1:] == ["0", ""], line[-1]
    assert len(list(tmp_path.glob("*/summary.json"))) == 1
