"""Giving freed memory back to the OS between the phases of a run.

glibc keeps freed heap arenas mapped after the objects in them are gone, so a phase that built
and dropped many small objects (the load: requests, events, buffers) leaves resident memory that
the next phase (the summary or the report, which read every record back as columns) would add
its own peak to. Each of those phases starts by returning it. This module is a leaf.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc


def give_back_freed_memory() -> None:
    """Collect garbage, then ask glibc to return free heap pages (no-op elsewhere)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
