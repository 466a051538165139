"""`kill -9` of `loadgen experiment` midway, then `--resume`: the server it had started is
gone, finished cells are not run again, the killed cell's folder is kept aside, and the
ranking is the one an uninterrupted run of the same file gives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import LOADGEN, ROOT, alive_with, cli, cli_env

PY = sys.executable


def experiment(tmp: Path, marker: str) -> Path:
    (tmp / "work.yaml").write_text(
        "name: tiny\ntarget: {endpoint: chat, ignore_eos: true}\n"
        "workload: {seed: 0, input_tokens: 256, output_tokens: 32}\nload: {concurrency: 1}\n"
    )
    path = tmp / "exp.yaml"
    path.write_text(f"""
name: resume
profile: work.yaml
load: {{stages: [{{concurrency: 8, duration_s: 4}}]}}
sla: {{ttft_ms: 700, tpot_ms: 50}}
repeats: 2
backends:
  - name: h100
    sim: llama3-8b-fp16@h100
  - name: a100
    serve: "{PY} -m loadgen sim --port {{port}} --preset llama3-8b-fp16@a100
      --ground-truth {tmp}/{marker}.jsonl"
    ready_timeout_s: 60
    stop_grace_s: 2
""")
    return path


def state(folder: Path) -> dict:
    try:
        return json.loads((folder / "experiment.json").read_text())
    except (OSError, ValueError):
        return {}


def test_kill9_then_resume_keeps_finished_cells_and_ranks_the_same(tmp_path):
    marker = f"gt-{tmp_path.name}"
    path = experiment(tmp_path, marker)
    folder = tmp_path / "killed"
    proc = subprocess.Popen(
        [*LOADGEN, "experiment", str(path), "--out", str(tmp_path), "--id", "killed"],
        env=cli_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    victim = None
    while time.monotonic() < deadline and victim is None:
        cells = state(folder).get("cells", {})
        done = [k for k, c in cells.items() if c["state"] == "done"]
        running = [k for k, c in cells.items() if c["state"] == "running" and k.startswith("a100/")]
        if done and running and (folder / running[0]).is_dir():  # its server is ready, its run started
            victim = running[0]
        time.sleep(0.2)
    assert victim is not None, "no a100 cell ran after a finished one"
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = state(folder)["cells"]
    finished = {
        k: (folder / c["run_dir"] / "summary.json").stat().st_mtime_ns
        for k, c in before.items()
        if c["state"] == "done"
    }
    assert before[victim]["state"] == "running"
    for _ in range(50):  # the reaper: SIGTERM now, SIGKILL after the 2 s grace
        if not alive_with(marker):
            break
        time.sleep(0.2)
    assert alive_with(marker) == []

    resumed = cli("experiment", "--resume", str(folder), timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = state(folder)
    assert after["complete"] is True
    assert all(c["state"] == "done" for c in after["cells"].values())
    for k, mtime in finished.items():  # not run again
        assert (folder / after["cells"][k]["run_dir"] / "summary.json").stat().st_mtime_ns == mtime
        assert after["cells"][k]["attempts"] == 1
    assert after["cells"][victim]["attempts"] == 2
    assert (folder / f"{victim}.attempt-1").is_dir()  # the killed attempt's records are kept

    whole = cli("experiment", str(path), "--out", str(tmp_path), "--id", "whole", timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    ranks = [[r["config"] for r in state(tmp_path / f)["ranking"]["rows"]] for f in ("killed", "whole")]
    assert ranks[0] == ranks[1] == ["h100", "a100"]
    assert alive_with(marker) == []
