"""``kill -9`` mid-run loses only the requests in flight, and never tears a line.

``loadgen run`` (a real ``python -m loadgen`` process, closed loop c=4, ~200 ms per request)
streams against the scripted server and is SIGKILLed at seeded random points in the load. The
server logs when it finished each response on CLOCK_MONOTONIC, the clock loadgen and this test
read (``time.perf_counter_ns``), so every response it finished comfortably before the kill must
be in requests.jsonl as an ok record with that response id; only requests in flight may be
missing. Every line of the file must parse: a killed run keeps whole records, nothing torn.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen.records import ReadReport, read_records
from loadgen.testing import StreamServer

REPO = Path(__file__).resolve().parents[2]
SEED = 20240917
# Three kills, one run each, spread over the load's first seconds (seeded: CI kills where a
# laptop does). The load runs ~10 s if left alone, so every kill lands mid-load.
KILL_AFTER_S = [
    round(random.Random(SEED + i).uniform(lo, hi), 3)
    for i, (lo, hi) in enumerate(((0.5, 0.9), (1.1, 1.5), (1.9, 2.3)))
]
MARGIN_NS = 50_000_000  # a response finished this long before the kill must have its record
OUTPUT_TOKENS = 20  # 5 ms to the first token + 19 x 10 ms: ~200 ms a request


@pytest.fixture(scope="module")
def slow_server():
    with StreamServer(ttft_ms=5, itl_ms=10) as s:
        yield s


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }


def _first_request_ns(server: StreamServer, proc: subprocess.Popen, stderr: Path, deadline_s: float) -> int:
    """When the server received the run's first request (CLOCK_MONOTONIC ns): the load's start."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        entries = server.log()
        if entries:
            return min(e["recv_ns"] for e in entries.values())
        if proc.poll() is not None:
            pytest.fail(
                f"loadgen exited ({proc.returncode}) before its first request:\n"
                f"{stderr.read_text(errors='replace')[-3000:]}"
            )
        time.sleep(0.02)
    pytest.fail(f"no request reached the server within {deadline_s} s")


@pytest.mark.timing_absolute  # "finished before the kill" means by MARGIN_NS (50 ms)
@pytest.mark.timeout(60)
@pytest.mark.parametrize("kill_after_s", KILL_AFTER_S)
def test_kill9_keeps_every_finished_record_whole(slow_server, tmp_path, kill_after_s, record_property):
    slow_server.clear_log()
    out = tmp_path / "reports"
    cmd = [
        sys.executable,
        "-m",
        "loadgen",
        "run",
        "--url",
        slow_server.url,
        "--concurrency",
        "4",
        "--num-requests",
        "200",
        "--input-tokens",
        "16",
        "--output-tokens",
        str(OUTPUT_TOKENS),
        "--no-progress",
        "--no-report",
        "--no-preflight",  # the server's log holds the run's requests only, each owed a record
        "--out",
        str(out),
        "--run-id",
        "kill9",
        "--set",
        "server_metrics.enabled=false",
        "--set",
        "workload.prompt.server_tokenize=never",
    ]
    with open(tmp_path / "stdout", "wb") as so, open(tmp_path / "stderr", "wb") as se:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=so, stderr=se)
        try:
            t0 = _first_request_ns(slow_server, proc, tmp_path / "stderr", deadline_s=20)
            time.sleep(max(0.0, (t0 + int(kill_after_s * 1e9) - time.perf_counter_ns()) / 1e9))
            assert proc.poll() is None, "loadgen finished before the kill: the load is too short"
            kill_ns = time.perf_counter_ns()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.1)  # let the server notice the closed sockets before reading its log
    log = slow_server.log()

    path = out / "kill9" / "requests.jsonl"
    raw = path.read_bytes()
    lines = raw.splitlines()
    torn = [n for n, line in enumerate(lines, 1) if not _parses(line)]
    assert not torn, f"lines {torn} of {path} do not parse (last: {lines[-1][-200:]!r})"
    assert raw.endswith(b"\n") or not raw, f"the last record is torn: {raw[-200:]!r}"
    report = ReadReport()
    records = list(read_records(path, report))
    assert report.skipped_lines == 0
    assert len(records) == len(lines)

    by_id = {r.response_id: r for r in records if r.response_id}
    finished = [e for e in log.values() if e["end_ns"] is not None and e["end_ns"] < kill_ns - MARGIN_NS]
    in_flight = [e for e in log.values() if e["end_ns"] is None or e["end_ns"] >= kill_ns - MARGIN_NS]
    lost = [e["id"] for e in finished if e["id"] not in by_id]
    not_ok = [e["id"] for e in finished if e["id"] in by_id and not by_id[e["id"]].ok]
    summary = (
        f"kill at {kill_after_s} s into the load: server finished {len(finished)} before the "
        f"kill (-50 ms), {len(in_flight)} in flight; {len(records)} records "
        f"({sum(r.ok for r in records)} ok); lost beyond those in flight: {len(lost)}"
    )
    print(summary)
    record_property("kill9", summary)
    assert finished, f"nothing finished before the kill: {summary}"
    assert not lost, f"{summary}: no record for {lost[:10]}"
    assert not not_ok, f"{summary}: records not ok for {not_ok[:10]}"
    # Nothing invented either: every record's response id is one the server sent.
    unknown = [r.response_id for r in records if r.response_id and r.response_id not in log]
    assert not unknown, f"records for responses the server never sent: {unknown[:10]}"


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
