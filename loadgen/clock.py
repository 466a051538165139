"""One monotonic nanosecond clock, sleeping until an absolute deadline on it, acting every interval
on it, the one event loop every entry point runs its coroutine on (uvloop when it is installed,
asyncio otherwise), and the task helpers that never lose a cancel or a task."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
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


async def wait_for(aw: Awaitable[_T], timeout_s: float | None) -> _T:
    """``asyncio.wait_for`` that never swallows the caller's own cancellation.

    Before Python 3.12, a cancel that lands in the same loop turn as the awaited operation ends
    is dropped: wait_for returns its result, or raises its error, and the task runs on as if
    never cancelled (gh-86296). A connect refused in microseconds makes that turn common: a
    stopped run's slot then kept sending into a closed records file. Here a cancel that
    arrived during the wait is raised whatever the operation did."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # 3.11+; 3.10 cannot tell
    before = cancelling() if cancelling is not None else 0
    try:
        result = await asyncio.wait_for(aw, timeout_s)
    except asyncio.CancelledError:
        raise
    except BaseException:
        if cancelling is not None and cancelling() > before:
            raise asyncio.CancelledError() from None
        raise
    if cancelling is not None and cancelling() > before:
        raise asyncio.CancelledError()
    return result


async def run_together(coros: Iterable[Coroutine[Any, Any, Any]]) -> None:
    """Run ``coros`` as tasks until all return; when one fails or the caller is cancelled, cancel
    the others and wait until every one has ended before raising.

    ``asyncio.gather`` returns as soon as one child is cancelled or fails while the others run
    on, unowned: a load's slots outliving their stage would send after the run closed its
    records."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    finally:
        await cancel_all(tasks)


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended (its ``finally`` blocks run)."""
    pending = [t for t in tasks if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.wait(pending)


async def every(interval_s: float, stop: asyncio.Event, action: Callable[[], Awaitable[Any]]) -> None:
    """Run ``action`` every ``interval_s`` on absolute deadlines (start + k x interval, so the
    schedule never drifts) until ``stop`` is set; after an action that overran deadlines, skip
    them instead of catching up in a burst. The scrapers' loop (server metrics, GPU telemetry)."""
    interval_ns = int(interval_s * 1e9)
    t0, k = now_ns(), 1
    while True:
        wait_s = (t0 + k * interval_ns - now_ns()) / 1e9
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(stop.wait(), max(0.0, wait_s))  # this module's: keeps a cancel
            return
        await action()
        k = max(k + 1, (now_ns() - t0) // interval_ns + 1)
