"""Conditions of a run: who was measured, with what, on what.

A number without its conditions is meaningless (the seed chapter's rule), so every result
carries these. Anything that could hold a credential passes through ``loadgen.redact`` first.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Literal

from loadgen import metric_defs
from loadgen.summary.conditions import ConditionsClient, ConditionsHost

_LIBRARIES = (
    "httpx",
    "httpcore",
    "h11",
    "aiohttp",
    "numpy",
    "pandas",
    "orjson",
    "pydantic",
    "pyyaml",
    "rich",
    "uvloop",
    "tokenizers",
    "matplotlib",
)


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the loadgen checkout, when it runs from one (editable installs)."""
    where = path or Path(__file__).resolve().parents[2]  # the checkout holding loadgen/
    if not (where / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def client_info(
    transport: str, event_loop: str, workers: int, placement: Literal["in-process", "processes", "ray"]
) -> ConditionsClient:
    from loadgen.version import __version__

    return {
        "loadgen_version": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "transport": transport,
        "event_loop": event_loop,
        "libraries": library_versions(),
        "workers": workers,
        "placement": placement,
        "metric_definitions": {
            "changed_in": metric_defs.DEFINITIONS_CHANGED,
            "changelog": changelog_anchor(metric_defs.DEFINITIONS_CHANGED),
        },
    }


def changelog_anchor(version: str) -> str:
    """The CHANGELOG.md entry of ``version``'s metric definitions (its heading's anchor)."""
    return f"CHANGELOG.md#metric-definitions-{version.replace('.', '')}"


def host_info() -> ConditionsHost:
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
