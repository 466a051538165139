"""The guides' figures against their commands: scripts/guide_figures.py runs every registered
command (the quickstart with energy, with a draft model, the experiments guide's sweep and its
`sim fit`, about 70 s) and every quoted figure must be within its tolerance of the run's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_quoted_figure_agrees_with_its_command():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "guide_figures.py")],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    n = last.split()[0]
    assert last == f"{n} of {n} quoted figures agree with their commands" and int(n) >= 30, last
