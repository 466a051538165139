"""loadgen/memory.py: the load runs with the heap before it frozen, and leaves it as it found it."""

from __future__ import annotations

import gc

import pytest

from loadgen.memory import frozen_for_the_load


class _Cycle:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_heap_that_was_not_frozen_is_frozen_for_the_load_and_unfrozen_after(unfrozen_heap):
    old = _Cycle()
    with frozen_for_the_load():
        assert gc.get_freeze_count() > 0
        new = _Cycle()
        assert any(o is new for o in gc.get_objects())  # the load's own objects are scanned
        assert not any(o is old for o in gc.get_objects())  # the old ones are not
    assert gc.get_freeze_count() == 0
    assert any(o is old for o in gc.get_objects())  # scanned again after the load


def test_a_heap_its_host_froze_stays_frozen():
    gc.freeze()
    old = _Cycle()
    with frozen_for_the_load():
        pass
    assert gc.get_freeze_count() > 0
    assert not any(o is old for o in gc.get_objects())  # frozen by the load, and left so


def test_an_error_in_the_load_still_unfreezes(unfrozen_heap):
    with pytest.raises(RuntimeError, match="the load failed"), frozen_for_the_load():
        raise RuntimeError("the load failed")
    assert gc.get_freeze_count() == 0
