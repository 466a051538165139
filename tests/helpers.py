"""Helpers the test files import (``from helpers import run``); fixtures stay in conftest.py.

A plain module on the tests' path rather than names taken from conftest.py: pytest imports a
conftest itself, under its own rules, and importing it again as a module is not supported.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.backends.stream import SSEResponse
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
    """Make this process's client slow on purpose: every chunk it reads costs ``burn_ms`` of
    CPU in the consumer, after the read's timestamp, so later chunks queue behind it."""
    feed = SSEResponse.feed

    def slow_feed(self: SSEResponse, t: int, raw: bytes) -> bool:
        out = feed(self, t, raw)
        until = time.perf_counter_ns() + int(burn_ms * 1e6)
        while time.perf_counter_ns() < until:
            pass
        return out

    monkeypatch.setattr(SSEResponse, "feed", slow_feed)
