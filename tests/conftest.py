"""Shared fixtures: scripted streaming servers on loopback, and profiles pointed at them; every
test under tests/slow/ is marked ``slow``.

Helpers that test files import by name live in helpers.py (``from helpers import run``)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from loadgen.testing import StreamServer

from helpers import profile

SLOW = Path(__file__).parent / "slow"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The folder is the marker: a test under tests/slow/ is slow (``-m "not slow"`` skips it)."""
    for item in items:
        if SLOW in item.path.parents:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze the heap once every test module is imported (pandas, matplotlib, pyarrow: some
    150 k objects): each run's collections before its load and its summary (loadgen/memory.py)
    then walk only what the tests made since, not 80 ms of libraries per collection, hundreds of
    times a worker. A run leaves a heap its host froze frozen, so this holds for the session."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def unfrozen_heap():
    """The heap as `loadgen run` finds it, not frozen (the suite's freeze above undone for the
    test), frozen again afterwards."""
    gc.unfreeze()
    yield
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def _no_saved_selfcheck(tmp_path_factory):
    """Runs look up this machine's saved `loadgen selfcheck` (~/.cache/loadgen): tests never see
    the user's; tests of the self-check point LOADGEN_CACHE_DIR at their own folder."""
    mp = pytest.MonkeyPatch()
    mp.setenv("LOADGEN_CACHE_DIR", str(tmp_path_factory.mktemp("loadgen-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def server():
    """The scripted server: 50 ms to first token, 10 ms between tokens, unless a test says otherwise."""
    with StreamServer(ttft_ms=50, itl_ms=10) as s:
        yield s


@pytest.fixture
def make_profile(tmp_path: Path):
    """A profile for the given server, as if the CLI had been given these dotted overrides
    (helpers.profile, writing under this test's tmp_path)."""

    def make(url: str | None, **overrides: Any):
        return profile(tmp_path, url, **overrides)

    return make
