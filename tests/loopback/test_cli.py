"""The real command line, as a user runs it: ``python -m loadgen ...`` in a subprocess.

Exit codes are the contract CI scripts rely on: 0 done, 1 SLA failed with --fail-on-sla, 2 bad
input or an unreachable target (a one-line message, never a traceback). Runs that need a server
use the built-in simulator through ``--sim``, so every test here is self-contained.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from loadgen.cli.main import build_parser

from helpers import LOADGEN, cli, cli_env

REPO = Path(__file__).resolve().parents[2]
SIM = "llama3-8b-fp16@h100"


def _run_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _walk(parser: argparse.ArgumentParser, where: str = "loadgen"):
    """Every (command path, action) in the parser and its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            # The subcommand list itself is documented by each subcommand's own help line.
            for choice in action._choices_actions:
                yield f"{where} {choice.dest}", choice
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{where} {name}")
        else:
            yield where, action


def test_help_exits_0_and_every_option_is_documented(tmp_path):
    """`run --help` and `sim --help` exit 0; every argparse action (subcommands too) has help text."""
    for cmd in ("run", "sim"):
        res = cli(cmd, "--help", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert "usage: loadgen" in res.stdout
    missing = [
        f"{where}: {'/'.join(a.option_strings) or a.dest}"
        for where, a in _walk(build_parser())
        if not (a.help or "").strip()
    ]
    assert not missing, f"options without help text: {missing}"


def test_bad_profile_exits_2_naming_the_yaml_path(tmp_path):
    """A misspelt `load.arrival` exits 2 with the YAML path in stderr and no traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("load: {arrival: possion, rate: 2}\n")
    res = cli("run", str(bad), cwd=tmp_path)
    assert res.returncode == 2
    assert "load.arrival" in res.stderr
    assert "possion" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout


def test_unreachable_url_exits_2_with_one_line(tmp_path):
    """A closed port exits 2 with a single `loadgen: error:` line naming the URL, no traceback."""
    res = cli(
        "run",
        "ci-smoke",
        "--url",
        "http://127.0.0.1:9",
        "--no-progress",
        "--out",
        str(tmp_path / "reports"),
        cwd=tmp_path,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("loadgen: error:")
    assert "127.0.0.1:9" in lines[0]
    assert "Traceback" not in res.stderr + res.stdout


@pytest.mark.slow
def test_sim_run_writes_the_result_files(tmp_path):
    """`run --sim PRESET` exits 0, prints the results path, and writes summary, 8 records and ground truth."""
    out = tmp_path / "reports"
    res = cli(
        "run",
        str(REPO / "profiles" / "ci-smoke.yaml"),
        "--sim",
        SIM,
        "--out",
        str(out),
        "--num-requests",
        "8",
        "--warmup",
        "0",
        "--no-report",  # the report is test_report's; rendering it costs ~2 s
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    run_dir = _run_dir(out)
    assert "results" in res.stdout and run_dir.name in res.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["counts"]["ok"] == 8
    assert summary["conditions"]["target"]["builtin_simulator"]["config"]["preset"] == SIM
    assert len((run_dir / "requests.jsonl").read_text().splitlines()) == 8
    assert len((run_dir / "ground_truth.jsonl").read_text().splitlines()) == 8


@pytest.mark.slow
def test_fail_on_sla_exits_1_when_a_rule_fails(tmp_path):
    """`--fail-on-sla` with an impossible rule (p50 TTFT < 1 us) exits 1 and the verdict is fail."""
    out = tmp_path / "reports"
    res = cli(
        "run",
        "ci-smoke",
        "--sim",
        SIM,
        "--out",
        str(out),
        "--num-requests",
        "4",
        "--warmup",
        "0",
        "--fail-on-sla",
        "--set",
        'sla.rules=["p50 ttft_ms < 0.001"]',
        "--no-report",  # the report is test_report's; rendering it costs ~2 s
        cwd=tmp_path,
    )
    assert res.returncode == 1, res.stderr
    summary = json.loads((_run_dir(out) / "summary.json").read_text())
    assert summary["sla"]["verdict"] == "fail"


@pytest.mark.slow
def test_label_is_recorded_in_the_summary(tmp_path):
    """`--label gpu=H200` appears verbatim in summary conditions.labels."""
    out = tmp_path / "reports"
    res = cli(
        "run",
        "ci-smoke",
        "--sim",
        SIM,
        "--out",
        str(out),
        "--num-requests",
        "4",
        "--warmup",
        "0",
        "--label",
        "gpu=H200",
        "--label",
        "tp=2",
        "--no-report",  # the report is test_report's; rendering it costs ~2 s
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads((_run_dir(out) / "summary.json").read_text())
    assert summary["conditions"]["labels"] == {"gpu": "H200", "tp": "2"}


@pytest.mark.slow  # a real-time run of several seconds
def test_sigint_stops_cleanly_and_keeps_every_record(tmp_path):
    """SIGINT mid-run exits 130 (an incomplete run) within 10 s, prints INCOMPLETE and no SLA
    verdict, with interrupted: true, cancelled > 0 and one JSONL line per request sent."""
    out = tmp_path / "reports"
    proc = subprocess.Popen(
        [
            *LOADGEN,
            "run",
            "ci-smoke",
            "--sim",
            SIM,
            "--out",
            str(out),
            "--run-id",
            "interrupted",
            "--num-requests",
            "10000",
        ],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        records = out / "interrupted" / "requests.jsonl"
        deadline = time.monotonic() + 20
        # Interrupt once the load is underway (warm-up done, some measured records written).
        while time.monotonic() < deadline and proc.poll() is None:
            if records.exists() and len(records.read_bytes().splitlines()) >= 8:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "INCOMPLETE" in stdout and "SLA PASS" not in stdout and "SLA FAIL" not in stdout
    assert "loadgen: incomplete run: stopped before its limits" in stderr
    summary = json.loads((out / "interrupted" / "summary.json").read_text())
    counts = summary["counts"]
    assert summary["interrupted"] is True
    assert summary["complete"] is False
    assert summary["sla"]["verdict"] == "incomplete"  # ci-smoke has rules: they are not judged
    assert counts["cancelled"] > 0
    assert counts["sent"] < 10000
    assert len(records.read_bytes().splitlines()) == counts["sent"] + counts["warmup"]


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`loadgen profiles | head -0`: the pipe is closed before loadgen writes; it exits 141
    (128 + SIGPIPE, as shell tools do) with nothing on stderr."""
    pipe = subprocess.PIPE
    p = subprocess.Popen([*LOADGEN, "profiles"], stdout=pipe, stderr=pipe, env=cli_env())
    p.stdout.close()  # before its imports are done: every write it makes meets a closed pipe
    err = p.stderr.read().decode()
    assert (p.wait(30), err) == (128 + signal.SIGPIPE, "")
