"""A run beside a CPU hog says the machine was busy (issue 39, part 5): the same short
simulator run, first on the idle machine and then beside three busy-looping processes on this
2-core machine, measures how much of each load some runnable task waited for a CPU
(``/proc/pressure/cpu``); the hog's run must show far more than the idle run of the same test,
name the busy machine in its client block, and say it where the user looks: beside a failed
fidelity check on the console and among a client_limited warning's reasons."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.runner import pressure
from loadgen.runner.health import BUSY_STALL_FRACTION

from helpers import LOADGEN, cli_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,  # it loads the machine on purpose, and an idle reference needs it idle
    pytest.mark.skipif(
        pressure.cpu_stall_us() is None, reason="the kernel keeps no CPU pressure stall information"
    ),
]

HOG = "while True: pass"


def run_sim(out: Path) -> tuple[dict, str]:
    import json

    done = subprocess.run(
        [
            *LOADGEN,
            "run",
            "chat",
            "--num-requests",
            "150",
            "--concurrency",
            "16",
            "--out",
            str(out),
            "--no-report",
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    run_dir = next(p for p in out.iterdir() if p.is_dir())
    return json.loads((run_dir / "summary.json").read_text()), done.stdout


def test_a_run_beside_a_cpu_hog_says_the_machine_was_busy(tmp_path):
    idle, _ = run_sim(tmp_path / "idle")
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(3)]
    try:
        busy, printed = run_sim(tmp_path / "busy")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    s_idle = idle["client"]["machine_cpu_stall_fraction"]
    s_busy = busy["client"]["machine_cpu_stall_fraction"]
    assert s_busy >= BUSY_STALL_FRACTION and s_busy > s_idle + 0.3, (s_idle, s_busy)
    assert ("busy_machine" in idle["client"]) == (s_idle >= BUSY_STALL_FRACTION)
    said = busy["client"]["busy_machine"]
    assert said.startswith(f"the machine was busy: a runnable task waited for a CPU {s_busy * 100:.0f} %")
    limited = [w for w in busy["client"]["warnings"] if w["warning"] == "client_limited"]
    if limited:  # the cause is named among the reasons
        assert said in limited[0]["reasons"]
    # On the console: beside a failed fidelity check as its why, else on the client's line.
    failed = busy.get("fidelity", {}).get("verdict") == "fail"
    assert f"{'why    ' if failed else 'machine'} {said}" in printed
