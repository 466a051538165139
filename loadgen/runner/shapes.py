"""Load shapes: when each request goes out. The driver runs one; a shape only decides timing.

A shape gets a ``Dispatcher`` from the driver and uses it to send: ``send`` runs one request to
its record and returns when it finished, ``spawn`` sends it in the background (tracked, so a
stop cancels it and the driver waits for it). The driver owns everything else: request ids,
the stop condition (count, duration, ``stop``), records, cancellation and the event-loop probe.
So a new shape (stages, sessions, ramps) is one class here, and the measuring stays in one place.

Two shapes today:
- ``ClosedLoop(concurrency)``: N slots, each sends its next request as soon as its last ended;
  that next request is built while the last one is in flight (``Ahead``), so its schedule
  time is when the slot came free and building it never reads as send lag.
- ``OpenLoop(schedule_ns, max_concurrency)``: absolute send deadlines computed up front; a
  late send keeps both its scheduled and actual time, so lateness shows as client lag instead
  of vanishing (coordinated omission). An optional cap on in-flight requests makes the wait for
  a slot part of that lag too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from loadgen.clock import now_ns, run_together, sleep_until
from loadgen.records import RequestSpec


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered a request: the whole text, its output tokens, and the tool
    calls it made (id, name and arguments of each; a next round sends them back)."""

    text: str
    tokens: int
    tool_calls: tuple[dict[str, str], ...] = ()


class Dispatcher(Protocol):
    """What the driver offers a load shape."""

    @property
    def started_ns(self) -> int: ...

    def request_ids(self) -> Iterator[int]:
        """The ids still to send, shared by every caller (each id is handed out once)."""
        ...

    def past_end(self, t_ns: int) -> bool:
        """Whether the run's duration is over at ``t_ns`` (nothing more may be sent)."""
        ...

    def spec(self, i: int) -> RequestSpec: ...

    async def send(self, i: int, t_sched_ns: int, spec: RequestSpec | None = None) -> Answer | None:
        """Send request ``i`` now and return once its record is written: with its answer when
        it succeeded and the run reads answers (a session's next turn carries it)."""
        ...

    def spawn(
        self, i: int, t_sched_ns: int, spec: RequestSpec, on_done: asyncio.Semaphore | None = None
    ) -> None:
        """Send request ``i`` in the background; ``on_done`` is released when it finished."""
        ...

    async def drain(self) -> None:
        """Wait until every spawned request finished."""
        ...

    def wake_late(self, late_ns: int) -> None:
        """Record how late a timer woke for a send deadline (the client's own lateness)."""
        ...


class LoadShape(Protocol):
    async def run(self, d: Dispatcher) -> None: ...


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """``concurrency`` slots, each sending its next request as soon as its last one ended."""

    concurrency: int
    # A linear ramp: slots beyond ``ramp_from`` open one by one over ``ramp_s`` instead of all at
    # once (the driver marks what a ramp sends as warm-up).
    ramp_s: float = 0.0
    ramp_from: int = 0

    async def run(self, d: Dispatcher) -> None:
        ids = d.request_ids()  # shared: each slot takes the next id
        n, first = self.concurrency, min(self.ramp_from, self.concurrency)

        async def slot(k: int) -> None:
            ahead = Ahead(d, ids)
            ahead.build()  # the slot's first request, before the slot opens
            if self.ramp_s > 0 and k >= first:
                await sleep_until(d.started_ns + int(self.ramp_s * 1e9 * (k - first) / (n - first)))
            try:
                while (nxt := ahead.take()) is not None:
                    i, spec = nxt
                    t = now_ns()  # the slot is free: the request's schedule time
                    if d.past_end(t):
                        return
                    ahead.soon()  # the next one is built once this one has gone out
                    await d.send(i, t, spec)
            finally:
                ahead.cancel()

        await run_together(slot(k) for k in range(n))


class Ahead:
    """A closed-loop slot's next request, built while its last one is in flight, so building it
    (a tokenizer fitting its prompt to an exact length takes milliseconds) costs no send lag, as
    an open loop builds each request before its deadline.

    ``soon`` asks the event loop to build it in a callback: that runs after the current send has
    stamped its send time and gone out (everything up to the request's first wait runs before
    the loop takes its next callback), and before the answer can be read. ``take`` hands it
    over, building it there and then if the send returned first (a request that failed without
    waiting); an error building it is raised there, in the slot, as if built inline."""

    __slots__ = ("_d", "_error", "_handle", "_ids", "_next")

    def __init__(self, d: Dispatcher, ids: Iterator[int]) -> None:
        self._d, self._ids = d, ids
        self._next: tuple[int, RequestSpec] | None = None
        self._error: BaseException | None = None
        self._handle: asyncio.Handle | None = None  # a build asked for and not yet run

    def build(self) -> None:
        self._handle = None
        try:
            i = next(self._ids, None)
            self._next = None if i is None else (i, self._d.spec(i))
        except Exception as exc:  # noqa: BLE001 - raised in the slot by take(), as if built there
            self._error = exc

    def soon(self) -> None:
        self._handle = asyncio.get_running_loop().call_soon(self.build)

    def take(self) -> tuple[int, RequestSpec] | None:
        if self._handle is not None:  # the send returned before the loop ran the build
            self.cancel()
            self.build()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        nxt, self._next = self._next, None
        return nxt

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """Send at absolute deadlines (offsets from the start, ns); optionally cap requests in flight."""

    schedule_ns: Sequence[int] | npt.NDArray[np.int64]
    max_concurrency: int | None = None

    async def run(self, d: Dispatcher) -> None:
        sem = asyncio.Semaphore(self.max_concurrency) if self.max_concurrency else None
        t0 = d.started_ns
        for i, off in zip(d.request_ids(), self.schedule_ns):
            deadline = t0 + int(off)
            if d.past_end(deadline):
                break
            spec = d.spec(i)  # built before the deadline, so it costs no lag
            late = await sleep_until(deadline)
            if late is not None:
                d.wake_late(late)
            if sem is not None:
                await sem.acquire()
            d.spawn(i, deadline, spec, sem)
            await asyncio.sleep(0)  # let it send now, before the next spec is built
        await d.drain()
