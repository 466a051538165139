"""The guides' figures against their commands: scripts/guide_figures.py runs every registered
command once and every quoted figure must be within its tolerance of the run's. Three cases, so
the two workers share them: the levers experiment and its dry run (about 5 minutes); the capacity
guide's search and the plain run at its answer (about 7.5 minutes); and the rest (the quickstart
with energy and with a draft model, the experiments guide's sweep and its `sim fit`, the
shared-prefix chat with and without the prefix cache, the multi-turn and replay profiles: about
4.5 minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env

ROOT = Path(__file__).resolve().parents[2]
LEVERS = "levers-experiment,levers-dry-run"
CAPACITY = "capacity-cliff,run-at-capacity"


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    ("args", "at_least"),
    [(("--only", LEVERS), 34), (("--only", CAPACITY), 17), (("--skip", f"{LEVERS},{CAPACITY}"), 41)],
    ids=["levers", "capacity", "runs"],
)
def test_every_quoted_figure_agrees_with_its_command(args, at_least):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "guide_figures.py"), *args],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=1400,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    n = last.split()[0]
    assert last == f"{n} of {n} quoted figures agree with their commands" and int(n) >= at_least, last
