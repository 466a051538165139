"""`loadgen experiment` with real server processes: started, made ready, reset, stopped, and
failing alone (a command that exits at once, one never ready, one that dies mid-cell)."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

import pytest

from loadgen.sim import SimConfig, SimProcess

from helpers import alive_with, cli, schema_errors

PY = sys.executable
WORKLOAD = """
name: tiny
target: {endpoint: chat, ignore_eos: true}
workload: {seed: 0, input_tokens: 64, output_tokens: 8}
load: {concurrency: 1}
"""


def write(tmp: Path, body: str) -> Path:
    (tmp / "work.yaml").write_text(WORKLOAD)
    path = tmp / "exp.yaml"
    path.write_text(body)
    return path


SCRIPTS = {
    "exits.py": "import sys\nprint('MARKER-exits: bad flag', flush=True)\nsys.exit(3)\n",
    "never.py": "import time\nprint('MARKER-never: loading', flush=True)\ntime.sleep(300)\n",
    # serves the simulator until it is ready, then dies 2 s into the cell
    "dies.py": """import subprocess, sys, time, urllib.request
p = subprocess.Popen([sys.executable, "-m", "loadgen", "sim", "--port", sys.argv[1]])
while True:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health")
        break
    except OSError:
        time.sleep(0.1)
print("MARKER-dies: serving, dying in 2 s", flush=True)
time.sleep(2)
p.kill()
sys.exit(9)
""",
}


@pytest.mark.slow
def test_each_failing_server_fails_only_its_cell(tmp_path):
    """Four serve: backends: the good one finishes with its log in its run folder; the one
    that exits at once, the one never ready and the one that dies mid-cell each fail their
    own cell with the last lines of their log; nothing started is left running."""
    marker = tmp_path.name
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text)
    body = f"""
name: life
profile: work.yaml
load: {{stages: [{{concurrency: 2, duration_s: 6}}]}}
sla: {{ttft_ms: 5000}}
repeats: 1
backends:
  - name: good
    serve: "{PY} -m loadgen sim --port {{port}} --ground-truth {tmp_path}/gt-{marker}.jsonl"
    ready_timeout_s: 60
  - name: exits
    serve: "{PY} {tmp_path}/exits.py {{port}} {marker}"
  - name: never
    serve: "{PY} {tmp_path}/never.py {{port}} {marker}"
    ready_timeout_s: 3
    stop_grace_s: 1
  - name: dies
    serve: "{PY} {tmp_path}/dies.py {{port}} {marker}"
    ready_timeout_s: 60
"""
    done = cli("experiment", str(write(tmp_path, body)), "--out", str(tmp_path), "--id", "e", timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    state = json.loads((tmp_path / "e" / "experiment.json").read_text())
    assert schema_errors("experiment", state) == []  # failed cells, their errors, a ranking of one
    cells = state["cells"]
    assert {k: c["state"] for k, c in cells.items()} == {
        "good/repeat-1": "done",
        "exits/repeat-1": "failed",
        "never/repeat-1": "failed",
        "dies/repeat-1": "failed",
    }
    assert "exited with code 3 before it was ready" in cells["exits/repeat-1"]["error"]
    assert "MARKER-exits: bad flag" in cells["exits/repeat-1"]["error"]
    assert "not ready (/v1/models answering 200) within 3 s" in cells["never/repeat-1"]["error"]
    assert "MARKER-never: loading" in cells["never/repeat-1"]["error"]
    good = tmp_path / "e" / "good" / "repeat-1"
    assert (good / "summary.json").exists() and (good / "server.log").exists()
    summary = json.loads((good / "summary.json").read_text())
    labels = summary["conditions"]["labels"]
    assert labels["backend"] == "good" and "-m loadgen sim --port" in labels["serve_command"]
    assert (tmp_path / "e" / "never" / "repeat-1" / "server.log").read_text().startswith("MARKER-never")
    assert alive_with(marker) == []
    assert "1. good" in done.stdout
    dies = cells["dies/repeat-1"]["error"]
    assert "exited with code 9 during the cell" in dies
    assert "MARKER-dies: serving" in dies


@pytest.mark.slow
def test_reset_hooks_reach_the_server_before_every_cell(tmp_path):
    """A url: backend with two reset hooks, two repeats: the simulator counts four resets;
    a hook the server does not serve fails its cell, naming it and the status."""
    with SimProcess(SimConfig.from_dict({"preset": "llama3-8b-fp16@h100", "time_scale": 0.2})) as sim:
        body = f"""
name: resets
profile: work.yaml
load: {{stages: [{{concurrency: 1, num_requests: 3}}]}}
sla: {{ttft_ms: 5000}}
repeats: 2
backends:
  - name: warm
    url: {sim.url}
    reset: ["POST /reset_prefix_cache", "POST /flush_cache"]
  - name: wrong
    url: {sim.url}
    reset: ["POST /no_such_reset"]
"""
        done = cli("experiment", str(write(tmp_path, body)), "--out", str(tmp_path), "--id", "e")
        with urllib.request.urlopen(sim.url + "/metrics") as r:
            text = r.read().decode()
    assert done.returncode == 1, done.stderr[-2000:]
    assert re.search(r"^loadgen_sim_cache_resets_total\{[^}]*\} 4$", text, re.M), text[-300:]
    state = json.loads((tmp_path / "e" / "experiment.json").read_text())
    assert state["cells"]["warm/repeat-2"]["state"] == "done"
    assert (
        "reset hook POST /no_such_reset (target.reset_path, --reset-path) answered HTTP 404"
        in (state["cells"]["wrong/repeat-1"]["error"])
    )


@pytest.mark.slow
def test_ctrl_c_stops_the_cell_and_its_server(tmp_path):
    """SIGINT during a serve: cell: the run stops, the server is stopped, the cell is left to
    run again on --resume, and loadgen exits 130."""
    import signal
    import subprocess
    import time

    from helpers import LOADGEN, ROOT, cli_env

    marker = f"gt-{tmp_path.name}"
    body = f"""
name: interrupted
profile: work.yaml
load: {{stages: [{{concurrency: 2, duration_s: 60}}]}}
sla: {{ttft_ms: 5000}}
repeats: 1
backends:
  - name: one
    serve: "{PY} -m loadgen sim --port {{port}} --ground-truth {tmp_path}/{marker}.jsonl"
    ready_timeout_s: 60
"""
    proc = subprocess.Popen(
        [*LOADGEN, "experiment", str(write(tmp_path, body)), "--out", str(tmp_path), "--id", "e"],
        env=cli_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_dir = tmp_path / "e" / "one" / "repeat-1"
    deadline = time.monotonic() + 60
    while not (run_dir / "requests.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err
    cell = json.loads((tmp_path / "e" / "experiment.json").read_text())["cells"]["one/repeat-1"]
    assert cell["state"] == "pending" and cell["error"].startswith("interrupted")
    assert alive_with(marker) == []


@pytest.mark.slow
def test_results_backends_join_the_ranking(tmp_path):
    """Last quarter's GuideLLM sweep (a results: backend) is ranked beside today's run at the
    same SLA: its stages carry percentiles, not per-request flags, so its capacity is its
    highest stage whose p99s meet every bound (7.13 req/s: the saturated stage's p99 TTFT,
    5,013 ms, does not)."""
    fixture = Path(__file__).parents[1] / "fixtures" / "peer_results" / "guidellm" / "benchmarks.json"
    body = f"""
name: history
profile: work.yaml
load: {{stages: [{{concurrency: 2, num_requests: 6}}]}}
sla: {{ttft_ms: 700, tpot_ms: 50}}
repeats: 1
backends:
  - {{name: today, sim: llama3-8b-fp16@h100}}
  - {{name: guidellm-q3, results: {fixture}}}
"""
    done = cli("experiment", str(write(tmp_path, body)), "--out", str(tmp_path), "--id", "e")
    assert done.returncode == 0, done.stderr[-2000:]
    state = json.loads((tmp_path / "e" / "experiment.json").read_text())
    assert list(state["cells"]) == ["today/repeat-1"]  # results are read, not run
    row = next(r for r in state["ranking"]["rows"] if r["config"] == "guidellm-q3")
    assert row["figures"]["capacity_rps"]["values"] == [7.13]
    assert row["bases"] == ["highest passing stage"]
    assert row["notes"] == [f"results read from {fixture}"]


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path):
    """--dry-run: every cell in its interleaved order with its expected time, the total; no
    folder is made. A bad sweep key is named with the cell whose profile it breaks."""
    body = """
name: plan
profile: work.yaml
load: {sweep: {concurrency: [1, 2], stage_duration_s: 5}}
sla: {ttft_ms: 700}
repeats: 2
backends:
  - {name: a, sim: "llama3-8b-fp16@{gpu}", matrix: {gpu: [h100, a100]}}
"""
    done = cli("experiment", str(write(tmp_path, body)), "--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("4 cells, expected 0.9 min")  # 4 x (0.6 + 2 x (5 + 0.9)) + 3 s = 52.6 s
    assert lines[2] == (
        "  estimated from the cells' stages, each +0.9 s to drain, +0.6 s a cell (+30 s a serve: "
        "server's start), +3 s for the report; no earlier run of this file to measure from"
    )
    cells = [line.split(". ", 1)[1] for line in lines[3:]]
    assert sorted(cells[:2]) == [
        "a gpu=a100" + " " * 39 + "repeat 1  ~12 s",
        "a gpu=h100" + " " * 39 + "repeat 1  ~12 s",
    ]
    assert all("repeat 2" in c for c in cells[2:])
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []
    bad = cli(
        "experiment", str(write(tmp_path, body.replace("stage_duration_s", "stage_duraton_s"))), "--dry-run"
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert re.search(
        r"the profile of a gpu=(h100|a100) \(\S*work.yaml with this file's load, sla", bad.stderr
    )
    assert "load.sweep.stage_duraton_s: unknown key; did you mean 'stage_duration_s'?" in bad.stderr


@pytest.mark.slow
def test_a_servers_secrets_never_reach_a_file_or_the_console(tmp_path):
    """A server that prints its arguments and environment (as vLLM prints its args) and
    fails: the key given as --api-key, and HF_TOKEN from the backend's env, are masked in its
    server.log, the cell's error in experiment.json and the console."""
    key, token = "sk-live-0123456789abcdef", "hf_0123456789abcdefghij"
    (tmp_path / "echo.py").write_text(
        "import os, sys\nprint('args', sys.argv, 'token', os.environ['HF_TOKEN'], flush=True)\nsys.exit(4)\n"
    )
    body = f"""
name: secrets
profile: work.yaml
load: {{stages: [{{concurrency: 1, num_requests: 1}}]}}
sla: {{ttft_ms: 5000}}
repeats: 1
backends:
  - name: leaky
    serve: "{PY} {tmp_path}/echo.py --port {{port}} --api-key {key}"
    env: {{HF_TOKEN: {token}}}
"""
    done = cli("experiment", str(write(tmp_path, body)), "--out", str(tmp_path), "--id", "e")
    assert done.returncode == 1
    files = [p for p in (tmp_path / "e").rglob("*") if p.is_file()]
    assert any(p.name == "server.log" for p in files)
    for text in [done.stdout, done.stderr, *(p.read_text(errors="replace") for p in files)]:
        assert key not in text and token not in text
    error = json.loads((tmp_path / "e" / "experiment.json").read_text())["cells"]["leaky/repeat-1"]["error"]
    assert "exited with code 4 before it was ready" in error and "--api-key ***" in error


SCRIPTED = r"""
name: scripted
profile: work.yaml
load: {stages: [{concurrency: 2, num_requests: 12}]}
sla: {ttft_ms: 150}
repeats: 2
backends:
  - name: fast
    serve: "PY -m loadgen.testing --port {port} --config '{{\"ttft_ms\": 20, \"itl_ms\": 2}}'"
  - name: slow
    serve: "PY -m loadgen.testing --port {port} --config '{{\"ttft_ms\": 300, \"itl_ms\": 2}}'"
"""


@pytest.mark.slow
def test_scripted_servers_rank_by_their_script(tmp_path):
    """Two scripted servers started by serve: (shell-style quotes, literal braces doubled):
    the one that answers in 20 ms meets a 150 ms TTFT SLO on every request, the one that
    answers in 300 ms on none; the first ranks, the second has no capacity at the SLA."""
    done = cli(
        "experiment", str(write(tmp_path, SCRIPTED.replace("PY", PY))), "--out", str(tmp_path), "--id", "e"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    state = json.loads((tmp_path / "e" / "experiment.json").read_text())
    assert schema_errors("experiment", state) == []  # a ranking of two, one without a capacity
    rows = state["ranking"]["rows"]
    assert [r["config"] for r in rows] == ["fast", "slow"]
    assert rows[0]["versus_next"]["text"] == "the next has no capacity at the SLA"
    assert rows[1]["figures"]["capacity_rps"]["values"] == [None, None]
    assert rows[1]["bases"] == ["below the first stage"]
    for r in (1, 2):
        summary = json.loads((tmp_path / "e" / "fast" / f"repeat-{r}" / "summary.json").read_text())
        assert summary["counts"]["ok"] == 12 and summary["metrics"]["ttft_ms"]["p50"] >= 20.0
