"""The guides' figures against their commands: scripts/guide_figures.py runs every registered
command once (the quickstart with energy and with a draft model, the experiments guide's sweep
and its `sim fit`, the shared-prefix chat with and without the prefix cache, the multi-turn
and replay profiles: about 4.5 minutes) and every quoted figure must be within its tolerance
of the run's."""

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
    assert last == f"{n} of {n} quoted figures agree with their commands" and int(n) >= 41, last
