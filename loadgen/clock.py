"""One monotonic nanosecond clock, and sleeping until an absolute deadline on it."""

from __future__ import annotations

import asyncio
import time

now_ns = time.perf_counter_ns

# asyncio timers fire late by up to a scheduler tick; sleeping to within this margin and then
# yielding (not spinning) keeps the send within ~0.1 ms of its deadline without burning a core.
_COARSE_MARGIN_NS = 1_000_000


async def sleep_until(deadline_ns: int) -> int:
    """Sleep until ``deadline_ns`` on the ``now_ns`` clock; return how late we woke (ns, >= 0)."""
    remaining = deadline_ns - now_ns()
    if remaining > _COARSE_MARGIN_NS:
        await asyncio.sleep((remaining - _COARSE_MARGIN_NS) / 1e9)
    while (remaining := deadline_ns - now_ns()) > 0:
        # Short final approach: zero-length sleeps let other tasks run while we wait.
        if remaining > 200_000:
            await asyncio.sleep(remaining / 2e9)
        else:
            await asyncio.sleep(0)
    return max(0, now_ns() - deadline_ns)
