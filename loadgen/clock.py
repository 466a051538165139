"""One monotonic nanosecond clock, sleeping until an absolute deadline on it, and the one event
loop every entry point runs its coroutine on (uvloop when it is installed, asyncio otherwise)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

now_ns = time.perf_counter_ns

_T = TypeVar("_T")

# Event-loop timers wait in whole milliseconds (epoll's timeout unit), so a timer sleep can
# overshoot by up to 1 ms. Sleep on a timer until this margin before the deadline, then yield to
# other tasks in zero-length sleeps until it arrives: the send lands within tens of microseconds
# of its deadline, at the cost of at most this much busy-yielding per request.
_SPIN_NS = 1_200_000


async def sleep_until(deadline_ns: int) -> int | None:
    """Sleep until ``deadline_ns`` on the ``now_ns`` clock; return how late we woke (ns, >= 0),
    or None when the deadline had already passed (the caller was late, not the timer)."""
    remaining = deadline_ns - now_ns()
    if remaining <= 0:
        return None
    if remaining > _SPIN_NS:
        await asyncio.sleep((remaining - _SPIN_NS) / 1e9)
    while now_ns() < deadline_ns:
        await asyncio.sleep(0)
    return now_ns() - deadline_ns


def run_loop(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion on a fresh event loop: uvloop's when it is installed (the client
    then spends less CPU per streamed token, so its timestamps stay honest at a higher load),
    asyncio's otherwise. The one place the choice is made, for the CLI, the API and the workers."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
