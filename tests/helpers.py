"""Helpers the test files import (``from helpers import run``); fixtures stay in conftest.py.

A plain module on the tests' path rather than names taken from conftest.py: pytest imports a
conftest itself, under its own rules, and importing it again as a module is not supported.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loadgen.runner import api


def run(profile: Any, **kw: Any) -> Any:
    """Run a profile to completion in a fresh event loop, as `loadgen run` does."""
    return asyncio.run(api.run_async(profile, **kw))
