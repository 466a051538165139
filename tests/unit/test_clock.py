"""The clock module's asyncio helpers: a cancel is never lost, and no task outlives its owner."""

from __future__ import annotations

import asyncio
import sys

import pytest

from loadgen.clock import run_together, wait_for


async def _cancel_as_it_fails(waiting) -> asyncio.Task:
    """A task awaiting ``waiting(fut)``, cancelled in the very loop turn ``fut`` fails (a connect
    refused in microseconds while the run stops)."""
    fut = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(waiting(fut, 5.0))
    await asyncio.sleep(0)
    fut.set_exception(ConnectionRefusedError(111, "refused"))
    task.cancel()
    return task


def test_a_cancel_that_lands_as_the_operation_fails_is_raised():
    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await await_task(await _cancel_as_it_fails(wait_for))
        if sys.version_info < (3, 12):  # the stdlib drops it: what this helper is for
            with pytest.raises(ConnectionRefusedError):
                await await_task(await _cancel_as_it_fails(asyncio.wait_for))

    asyncio.run(main())


def test_a_cancel_that_lands_as_the_operation_succeeds_is_raised():
    async def main() -> None:
        fut = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(wait_for(fut, 5.0))
        await asyncio.sleep(0)
        fut.set_result(7)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_wait_for_keeps_its_result_and_its_timeout():
    async def main() -> None:
        assert await wait_for(asyncio.sleep(0, result=3), 1.0) == 3
        with pytest.raises(asyncio.TimeoutError):
            await wait_for(asyncio.sleep(10), 0.01)

    asyncio.run(main())


def test_run_together_ends_every_task_before_it_raises():
    """One task fails; the other, which swallows its first cancel (as a stdlib wait_for may), is
    cancelled again and has ended by the time run_together raises."""
    ended: list[str] = []

    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("boom")

    async def stubborn() -> None:
        try:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass  # swallowed once
            await asyncio.sleep(0.02)
        finally:
            ended.append("stubborn")

    async def main() -> None:
        with pytest.raises(ValueError):
            await run_together([fails(), stubborn()])
        assert ended == ["stubborn"]

    asyncio.run(main())


async def await_task(task: asyncio.Task):
    return await task
