"""A records file that stops taking lines stops the run with a clear message, never a traceback
and never a silent loss: the disk filling up mid-run (RLIMIT_FSIZE makes every write past a size
fail as a full disk would) and the run folder removed mid-run.
"""

from __future__ import annotations

import asyncio
import json
import re
import resource
import shutil
import signal
from pathlib import Path

import pytest

from loadgen.errors import RunError
from loadgen.runner import api
from loadgen.testing import StreamServer

import helpers
from helpers import cli, cli_env

REPO = Path(__file__).resolve().parents[2]
LIMIT = 24_000  # bytes: room for a few dozen records, not for 400


@pytest.fixture(scope="module")
def server():
    with StreamServer(ttft_ms=1, itl_ms=1) as srv:
        yield srv


def _full_disk() -> None:
    # In the child only: writes past LIMIT bytes fail with EFBIG instead of killing it (SIGXFSZ).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_a_full_disk_stops_the_run_and_says_what_was_saved(server, tmp_path):
    proc = cli(
        "run",
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
