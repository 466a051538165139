"""The package root's public names are pinned: a name added to or dropped from ``loadgen.__all__``
is a change to the public API and must be made here too; each resolves, and the version is
pyproject.toml's."""

from __future__ import annotations

import re
from pathlib import Path

import loadgen
from loadgen.version import __version__

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = [
    "ConfigError",
    "LoadgenError",
    "RequestRecord",
    "RunResult",
    "__version__",
    "compare",
    "gate",
    "load_run",
    "load_summary",
    "run",
    "run_async",
]


def test_the_public_names_are_pinned_and_resolve():
    assert loadgen.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(loadgen, name) is not None, name


def test_the_version_is_pyprojects_and_comes_from_a_leaf():
    said = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert said is not None and said.group(1) == __version__ == loadgen.__version__
