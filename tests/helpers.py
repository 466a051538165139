"""Helpers the test files import (``from helpers import run``); fixtures stay in conftest.py.

A plain module on the tests' path rather than names taken from conftest.py: pytest imports a
conftest itself, under its own rules, and importing it again as a module is not supported.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadgen.backends.transports import httptools_conn, httptools_pool
from loadgen.runner import api

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m loadgen ARGS`` in ``cwd`` with this checkout on the path (bounded, 120 s)."""
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def run(profile: Any, **kw: Any) -> Any:
    """Run a profile to completion in a fresh event loop, as `loadgen run` does."""
    return asyncio.run(api.run_async(profile, **kw))


def slow_client(monkeypatch: pytest.MonkeyPatch, burn_ms: float) -> None:
    """Make this process's client slow on purpose: every read of the (default) httptools
    transport costs ``burn_ms`` of CPU before it is stamped, so reads that arrive together are
    stamped one burn after another, as on a client whose read path is that slow. (A burn in
    the consumer would not do: the transport stamps every read of a loop turn before parsing
    any of them.)"""
    clock = httptools_pool.now_ns

    def slow_now() -> int:
        until = clock() + int(burn_ms * 1e6)
        while clock() < until:
            pass
        return clock()

    monkeypatch.setattr(httptools_conn, "now_ns", slow_now)  # the reads' stamps
    monkeypatch.setattr(httptools_pool, "now_ns", slow_now)
