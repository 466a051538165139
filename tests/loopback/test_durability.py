"""A records file that stops taking lines stops the run with a clear message, never a traceback
and never a silent loss: the disk filling up mid-run (RLIMIT_FSIZE makes every write past a size
fail as a full disk would) and the run folder removed mid-run. A columnar run killed with
``kill -9`` keeps every finished record, and compacts into its store later
(tests/slow/test_kill9.py proves the same of a jsonl run at three kill points).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.errors import RunError
from loadgen.records import ReadReport
from loadgen.result import REQUESTS, STORE, load_records
from loadgen.runner import api
from loadgen.testing import StreamServer

import helpers
from helpers import cli, cli_env

REPO = Path(__file__).resolve().parents[2]
LIMIT = 24_000  # bytes: room for a few dozen records, not for 400
MARGIN_NS = 50_000_000  # a response finished this long before the kill must have its record


@pytest.fixture(scope="module")
def server():
    with StreamServer(ttft_ms=1, itl_ms=1) as srv:
        yield srv


def _full_disk() -> None:
    # In the child only: writes past LIMIT bytes fail with EFBIG instead of killing it (SIGXFSZ).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.parametrize("records", ["jsonl", "columnar"])
def test_a_full_disk_stops_the_run_and_says_what_was_saved(server, tmp_path, records):
    """A columnar run too: its log stops, and stays (no store is compacted from a log that
    could not take every record)."""
    proc = cli(
        "run",
        "--records",
        records,
        "--url",
        server.url,
        "--concurrency",
        "4",
        "--num-requests",
        "400",
        "--output-tokens",
        "16",
        "--input-tokens",
        "8",
        "--out",
        str(tmp_path),
        "--run-id",
        "full",
        "--no-progress",
        "--no-report",
        "--set",
        "server_metrics.enabled=false",
        cwd=tmp_path,
        preexec_fn=_full_disk,
        env={**cli_env(), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    m = re.search(r"loadgen: error: .*(?:requests\.jsonl|summary\.json).*?(\d+) records", proc.stderr)
    assert m, proc.stderr
    lines = (tmp_path / "full" / "requests.jsonl").read_bytes().splitlines()
    assert 0 < len(lines) < 400
    assert all(json.loads(line)["ok"] for line in lines)  # every line whole, and each a finished request
    assert len(lines) == int(m.group(1))
    assert not (tmp_path / "full" / STORE).exists()


def test_a_removed_run_folder_stops_the_run_with_a_clear_error(server, tmp_path):
    profile = helpers.profile(
        tmp_path,
        server.url,
        **{
            "workload.num_requests": 2000,
            "workload.output_tokens": 16,
            "workload.input_tokens": 8,
            "output.dir": str(tmp_path),
            "output.run_id": "gone",
            "server_metrics.enabled": False,
        },
    )

    async def go() -> None:
        asyncio.get_running_loop().call_later(0.5, shutil.rmtree, tmp_path / "gone")
        await asyncio.wait_for(api.run_async(profile), 60)

    with pytest.raises(RunError, match=r"run folder .*gone was removed during the run"):
        asyncio.run(go())


@pytest.mark.timing_absolute  # "finished before the kill" means by MARGIN_NS (50 ms)
@pytest.mark.timeout(60)
def test_kill9_of_a_columnar_run_keeps_every_finished_record_and_compacts_them_later(tmp_path):
    """``kill -9`` a run with ``--records columnar`` 1 s into its load: it never reached the end
    that compacts, so its log holds every response the server finished before the kill (50 ms
    margin), whole; every reader reads it as it is; ``loadgen records --compact`` turns it into
    the store, the same records, and the store is what the readers read then."""
    with StreamServer(ttft_ms=5, itl_ms=10) as srv:  # ~200 ms a request: 4 in flight at a time
        out = tmp_path / "reports"
        cmd = [sys.executable, "-m", "loadgen", "run", "--url", srv.url, "--concurrency", "4"]
        cmd += ["--num-requests", "200", "--input-tokens", "16", "--output-tokens", "20"]
        cmd += ["--no-progress", "--no-report", "--no-preflight", "--records", "columnar"]
        cmd += ["--out", str(out), "--run-id", "k", "--set", "server_metrics.enabled=false"]
        cmd += ["--set", "workload.prompt.server_tokenize=never"]
        with open(tmp_path / "stderr", "wb") as se:
            proc = subprocess.Popen(cmd, cwd=tmp_path, env=cli_env(), stdout=subprocess.DEVNULL, stderr=se)
            try:
                t0 = _first_request_ns(srv, proc)
                time.sleep(max(0.0, (t0 + 1_000_000_000 - time.perf_counter_ns()) / 1e9))
                assert proc.poll() is None, "loadgen finished before the kill: the load is too short"
                kill_ns = time.perf_counter_ns()
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
        time.sleep(0.1)  # the server notices the closed sockets before its log is read
        log = srv.log()
    run_dir = out / "k"
    assert proc.returncode == -signal.SIGKILL and not (run_dir / STORE).exists()
    report = ReadReport()
    records = load_records(run_dir, report)
    assert report.skipped_lines == 0  # every line whole
    finished = {i for i, e in log.items() if e["end_ns"] is not None and e["end_ns"] < kill_ns - MARGIN_NS}
    got = {r.response_id for r in records}
    assert finished and finished <= got, f"no record for {sorted(finished - got)[:10]}"
    assert got <= set(log) and all(r.ok for r in records)

    proc = cli("records", str(run_dir), "--compact")
    assert proc.returncode == 0, proc.stderr
    assert f"{len(records)} records" in proc.stdout and not (run_dir / REQUESTS).exists()
    again = load_records(run_dir)
    assert [(r.id, r.response_id, r.output_tokens, len(r.chunk_times_ns)) for r in again] == [
        (r.id, r.response_id, r.output_tokens, len(r.chunk_times_ns)) for r in records
    ]
    assert all(
        abs(a - b) <= 500 for x, y in zip(records, again) for a, b in zip(x.chunk_times_ns, y.chunk_times_ns)
    )


def _first_request_ns(server: StreamServer, proc: subprocess.Popen) -> int:
    """When the server received the run's first request (CLOCK_MONOTONIC ns)."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        entries = server.log()
        if entries:
            return min(e["recv_ns"] for e in entries.values())
        assert proc.poll() is None, f"loadgen exited ({proc.returncode}) before its first request"
        time.sleep(0.02)
    pytest.fail("no request reached the server within 20 s")
