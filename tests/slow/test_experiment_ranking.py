"""An experiment ranks simulator presets the way their physics orders them: H100 (3.35 TB/s,
989 TFLOP/s) ahead of A100 (2.04 TB/s, 312 TFLOP/s) with intervals that separate, and the same
preset run twice "not distinguishable" from itself. Then its report and `gate --cell`."""

from __future__ import annotations

import json
import re

from helpers import cli

WORKLOAD = """
name: tiny
target: {endpoint: chat, ignore_eos: true, include_usage: true}
workload:
  seed: 0
  input_tokens: {kind: lognormal, mean: 512, sigma: 0.5, max: 2048}
  output_tokens: {kind: lognormal, mean: 32, sigma: 0.3, max: 128}
load: {concurrency: 1}
output: {answers: {keep: true}}
"""
EXPERIMENT = """
name: physics
profile: work.yaml
load:
  sweep: {concurrency: [4, 16], stage_duration_s: 3, ramp_s: 0.5}
sla: {ttft_ms: 700, tpot_ms: 50}
repeats: 3
backends:
  - {name: h100, sim: llama3-8b-fp16@h100, gpu_hour_cost: 3.99}
  - {name: h100-again, sim: llama3-8b-fp16@h100, gpu_hour_cost: 3.99}
  - {name: a100, sim: llama3-8b-fp16@a100, gpu_hour_cost: 1.89}
"""


def test_presets_rank_by_their_physics(tmp_path):
    (tmp_path / "work.yaml").write_text(WORKLOAD)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    done = cli("experiment", str(tmp_path / "exp.yaml"), "--out", str(tmp_path), "--id", "e", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "e"
    rows = json.loads((folder / "experiment.json").read_text())["ranking"]["rows"]
    order = [r["config"] for r in rows]
    assert order[2] == "a100" and set(order[:2]) == {"h100", "h100-again"}, order
    # the second H100 against the A100: intervals separate; the two H100s: not distinguishable
    assert rows[1]["versus_next"]["distinguishable"] is True, rows[1]["versus_next"]
    assert rows[0]["versus_next"]["distinguishable"] is False, rows[0]["versus_next"]
    assert rows[0]["versus_next"]["text"].startswith("not distinguishable from the next")
    caps = {r["config"]: r["figures"]["capacity_rps"] for r in rows}
    assert caps["a100"]["high"] < min(caps["h100"]["low"], caps["h100-again"]["low"])
    assert all(r["repeats"] == 3 for r in rows)
    # the console's ranking and the report
    assert "2. h100" in done.stdout and "(not distinguishable from 1)" in done.stdout
    md = (folder / "experiment.md").read_text()
    assert md.index("## Ranking") < md.index("## Pareto") < md.index("## Curves")
    html = (folder / "experiment.html").read_text()
    assert html.count("data:image/png;base64,") == 3  # self-contained: no src or href outside the file
    assert 'src="http' not in html and 'href="http' not in html
    assert (folder / "plots" / "experiment_pareto.png").stat().st_size > 10_000
    agreement = md.split("## Output agreement", 1)[1].split("##", 1)[0]
    assert f"Reference: {rows[0]['label']} (repeat 1)." in agreement
    assert re.search(r"\| a100 \| [0-9.]+ % \| [0-9]+ of [0-9]+ \|", agreement), agreement
    differ = md.split("## Conditions that differ", 1)[1].split("##", 1)[0]
    assert "builtin_simulator.config.preset" in differ and "target.url" not in differ
    # `loadgen report` on the folder redraws the experiment's report
    (folder / "experiment.md").unlink()
    redrawn = cli("report", str(folder))
    assert redrawn.returncode == 0 and (folder / "experiment.md").read_text() == md
    # each configuration is a repeated run folder the gate reads; a cell against the same cell
    same = cli("gate", str(folder), "--baseline", str(folder), "--cell", "h100")
    assert same.returncode == 0, same.stdout + same.stderr
    missing = cli("gate", str(folder), "--baseline", str(folder), "--cell", "h200")
    assert missing.returncode == 2
    assert "has no such configuration; it has: h100, h100-again, a100" in missing.stderr
