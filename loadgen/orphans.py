"""Child processes that end with their parent: the simulator, the workers and an experiment's
servers are started with ``preexec_fn=die_with_parent``, so a kill -9 of loadgen leaves no
server or worker behind. A leaf of the layering (the runner, the experiment and the simulator
all start processes; none of them owns this)."""

from __future__ import annotations

import contextlib
import sys


def die_with_parent() -> None:
    """In a child process, before it starts: ask Linux to end it when the process that
    started it dies, however that happens (a kill -9 of loadgen must not leave a server behind)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
