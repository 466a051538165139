"""Giving freed memory back to the OS between the phases of a run.

glibc keeps freed heap arenas mapped after the objects in them are gone, so a phase that built
and dropped many small objects (the load: requests, events, buffers) leaves resident memory that
the next phase (the summary or the report, which read every record back as columns) would add
its own peak to. Each of those phases starts by returning it. And the load runs with the heap
that existed before it frozen (``frozen_for_the_load``), so the collector's passes during the
load walk only what the load made. This module is a leaf.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Iterator


def give_back_freed_memory() -> None:
    """Collect garbage, then ask glibc to return free heap pages (no-op elsewhere)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@contextlib.contextmanager
def frozen_for_the_load() -> Iterator[None]:
    """Collect, then freeze every object the collector tracks for the load's duration: a
    collection during the load (its many short-lived objects trigger them) then walks only the
    load's own objects, not the imported libraries', so no pause grows with the process.

    A process that had already frozen its heap (``gc.freeze()`` in a host that runs many loads,
    such as the test suite) keeps it frozen: unfreezing would undo its choice, and its frozen
    heap is also what makes the collection here cheap."""
    host_froze = gc.get_freeze_count() > 0
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if not host_froze:
            gc.unfreeze()
