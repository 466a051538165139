"""`loadgen compare RUN FILE -o DIR`: a run on the built-in simulator beside each peer tool's
result file (tests/fixtures/peer_results): the file's numbers in compare.md and compare.json,
its definitions stated; a damaged file of each layout is exit code 2 and one line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from loadgen.cli.main import main

from helpers import profile, run

PEERS = Path(__file__).parents[1] / "fixtures" / "peer_results"
# (file or folder, its name in the comparison, tool, its p99 TTFT and output tokens/s as in the file)
CASES = [
    (
        PEERS / "vllm" / "openai-chat-infqps-concurrency8-tiny-llama-20260112-141503.json",
        "openai-chat-infqps-concurrency8-tiny-llama-20260112-141503",
        "vllm bench serve",
        318.5129,
        25344 / 41.23771,
    ),
    # a sweep: its stages carry the percentiles; its whole-file rate is over the summed windows
    (PEERS / "guidellm", "guidellm", "GuideLLM", None, (89.6 + 1757.4 + 912.6) * 30 / 90),
    (PEERS / "aiperf" / "profile_export_aiperf.json", "aiperf", "AIPerf", 166.48, 746.9),
    (PEERS / "inference_perf", "inference_perf", "inference-perf", 153.02, 128.48),
]


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory) -> Path:
    """One short run on the built-in simulator."""
    tmp = tmp_path_factory.mktemp("sim")
    res = run(profile(tmp, None, **{"sim.preset": "llama3-8b-fp16@h100", "workload.num_requests": 12}))
    return res.run_dir


def compare_cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["compare", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.slow
@pytest.mark.parametrize(("path", "name", "tool", "ttft_p99", "out_tps"), CASES, ids=[c[2] for c in CASES])
def test_a_run_beside_a_peer_file(sim_run, tmp_path, capsys, path, name, tool, ttft_p99, out_tps):
    code, out, _ = compare_cli(capsys, str(sim_run), str(path), "-o", str(tmp_path / "cmp"))
    assert code == 0
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert [r["name"] for r in data["runs"]][1] == name
    assert data["runs"][1]["tool"] == tool and "tool" not in data["runs"][0]
    assert data["metrics"]["ttft_ms p99"][name] == pytest.approx(ttft_p99)
    assert data["metrics"]["output_tokens_per_s"][name] == pytest.approx(out_tps)
    assert data["metrics"]["ttft_ms p99"][sim_run.name] is not None
    peer = data["peer_results"][name]
    assert peer["tool"] == tool and peer["definitions"]
    assert data["condition_diff"][0]["field"] == "source"
    assert data["condition_diff"][0]["values"][0] == "loadgen"
    assert "## Definitions that differ" in md and f"{name} is a results file of {tool}" in md
    assert all(f"- {d}" in md for d in peer["definitions"])
    assert "## Definitions that differ" in out  # the console shows it too


def test_a_guidellm_sweep_draws_curves(sim_run, tmp_path, capsys):
    code, _, _ = compare_cli(capsys, str(sim_run), str(PEERS / "guidellm"), "-o", str(tmp_path / "cmp"))
    assert code == 0
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    guidellm = next(r for r in data["curves"]["runs"] if r["name"] == "guidellm")
    assert [p["name"] for p in guidellm["points"]] == ["synchronous", "throughput", "constant@7.215"]
    assert [p["ttft_ms"]["p99"] for p in guidellm["points"]] == [47.92, 5012.88, 141.66]
    assert (tmp_path / "cmp" / "curve_ttft_ms_p99.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("source", "drop", "field"),
    [
        (CASES[0][0], ("duration",), "duration"),
        (PEERS / "guidellm" / "benchmarks.json", ("benchmarks", 0, "metrics"), "benchmarks.0.metrics"),
        (CASES[2][0], ("request_latency",), "request_latency"),
        (
            PEERS / "inference_perf" / "summary_lifecycle_metrics.json",
            ("load_summary", "count"),
            "load_summary.count",
        ),
    ],
    ids=[c[2] for c in CASES],
)
def test_a_damaged_file_is_one_line_and_exit_2(sim_run, tmp_path, capsys, source, drop, field):
    data = json.loads(source.read_text())
    node = data
    for key in drop[:-1]:
        node = node[key]
    del node[drop[-1]]
    path = tmp_path / source.name
    path.write_text(json.dumps(data))
    code, out, err = compare_cli(capsys, str(sim_run), str(path), "-o", str(tmp_path / "cmp"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and f"field {field} " in lines[0]


def test_an_unknown_json_file_is_one_line_and_exit_2(sim_run, tmp_path, capsys):
    """A .json that is not JSON says where it stops parsing; JSON of no known tool says what it
    could have been; either is one line and exit 2."""
    shutil.copy(PEERS / "README.md", tmp_path / "notes.json")
    code, _, err = compare_cli(
        capsys, str(sim_run), str(tmp_path / "notes.json"), "-o", str(tmp_path / "cmp")
    )
    assert code == 2
    assert (
        "notes.json: invalid JSON at byte 0 (line 1, column 1)" in err and len(err.strip().splitlines()) == 1
    )
    (tmp_path / "other.json").write_text('{"results": []}')
    code, _, err = compare_cli(capsys, str(sim_run), str(tmp_path / "other.json"), "-o", str(tmp_path / "c2"))
    assert code == 2
    assert "neither a loadgen run" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "the file is empty, so it holds no result"),
        ('{"benchmarks": [{"metrics": ', "invalid JSON at byte 28 (line 1, column 29)"),
        ('{"a": 1}\n{"b": \n', "invalid JSON on line 2 of its JSON lines, at column"),
    ],
    ids=["empty", "cut short", "a broken JSON line"],
)
def test_a_broken_peer_file_is_named_as_broken(tmp_path, text, said):
    """An empty, truncated or corrupt result file is an error naming what is wrong and where."""
    from loadgen.analysis.compare_peers import read_source
    from loadgen.errors import ResultError

    path = tmp_path / "benchmarks.json"
    path.write_text(text)
    with pytest.raises(ResultError, match=re.escape(said)):
        read_source(path)
