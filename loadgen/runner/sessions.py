"""The multi-turn load shape: conversations, each turn waiting for the last one's answer.

Plans make conversations (``Plan``): a user's sessions (``workload.sessions``: turns and think
times), an agent's tool rounds (``workload.tool_rounds``: a tool call answered with its result
after the tool's run time, ended early by an answer that calls no tool: ``goes_on``) and the
agentic sessions of ``workload.agentic``. A ``Graph`` is a session whose calls form a DAG (an
OpenTelemetry trace's LLM calls): a call is sent once every parent answered, after its pause,
and carries their answers; calls whose parents are done run at once, side by side.

A session sends turn 1, waits for its whole answer, waits the user's think time, then sends
turn 2 carrying the history (the earlier messages and the answers the server really sent), and
so on. Sessions run ``concurrency`` at a time (closed loop: a finished session's slot starts the
next one at once) or start at the absolute deadlines of ``schedule_ns`` (open loop: session
arrivals). A turn's ``t_sched_ns`` is when its user was ready to send (the previous answer's
end plus the think time), so a client that sends late shows it as lag. A failed turn ends its
session: the next turn would need the answer that never came.

Request ids come from the driver's shared iterator as turns are built (a later turn's before
its think time), so a count-limited run sends exactly its count of turns; session ids are
numbered as sessions start.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from loadgen.clock import cancel_all, now_ns, run_together, sleep_until
from loadgen.records import RequestSpec
from loadgen.runner.shapes import Dispatcher
from loadgen.workload.sessions import Turn


class Plan(Protocol):
    """What a conversation's turns are: a multi-turn session (``workload.sessions``) or an
    agent's tool rounds (``workload.tool_rounds``)."""

    def turns(self, s: int) -> int: ...
    def think_s(self, s: int, turn: int) -> float: ...
    def goes_on(self, calls: Sequence[dict[str, str]]) -> bool: ...
    def spec(self, i: int, s: int, turn: int, history: Sequence[Turn]) -> tuple[RequestSpec, Turn]: ...


@runtime_checkable
class Graph(Protocol):
    """A session of calls in dependency order (``workload.agentic.TraceDag``): ``nodes(s)`` gives
    each call's parents (earlier calls); ``spec`` builds a call from its parents' answers."""

    def nodes(self, s: int) -> Sequence[tuple[int, ...]]: ...
    def think_s(self, s: int, node: int) -> float: ...
    def spec(self, i: int, s: int, node: int, answers: Mapping[int, str]) -> RequestSpec: ...


@dataclass(frozen=True, slots=True)
class Sessions:
    plan: Plan | Graph
    concurrency: int | None = None
    schedule_ns: Sequence[int] | npt.NDArray[np.int64] | None = None

    async def run(self, d: Dispatcher) -> None:
        ids = d.request_ids()
        numbers = itertools.count()
        if self.concurrency is not None:

            async def slot() -> None:
                while await self._session(d, ids, next(numbers), None):
                    pass

            await run_together(slot() for _ in range(self.concurrency))
            return
        assert self.schedule_ns is not None  # open loop: session arrivals
        tasks: set[asyncio.Task[bool]] = set()
        t0 = d.started_ns
        try:
            for off in self.schedule_ns:
                deadline = t0 + int(off)
                if d.past_end(deadline):
                    break
                late = await sleep_until(deadline)
                if late is not None:
                    d.wake_late(late)
                task = asyncio.create_task(self._session(d, ids, next(numbers), deadline))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
        finally:
            await cancel_all(list(tasks))

    async def _session(self, d: Dispatcher, ids: Iterator[int], s: int, t_ready: int | None) -> bool:
        """Run session ``s`` to its end; False when the run has no ids or time left for it.
        ``t_ready``: when its user is ready to send turn 1 (an arrival's deadline), or None: as
        soon as turn 1 is built (a closed loop's free slot). Every later turn is built before
        its think time starts, so building it never reads as send lag. (An arrival's first
        turn is built at its deadline: its request id is only known then, the ids being shared
        with the later turns of the sessions already running.)"""
        plan = self.plan
        if isinstance(plan, Graph):
            return await self._graph(d, ids, s, t_ready, plan)
        history: list[Turn] = []
        for turn in range(1, plan.turns(s) + 1):
            if d.past_end(now_ns()):
                return False
            i = next(ids, None)
            if i is None:
                return False
            spec, mine = plan.spec(i, s, turn, history)
            if turn > 1:
                t_ready = now_ns() + int(plan.think_s(s, turn) * 1e9)
                await sleep_until(t_ready)
                if d.past_end(now_ns()):
                    return False
            elif t_ready is None:
                t_ready = now_ns()
            answer = await d.send(i, t_ready, spec)
            if answer is None:  # failed: the next turn has no answer to carry
                return True
            mine.answer, mine.answer_tokens = answer.text, answer.tokens
            mine.tool_calls = answer.tool_calls
            history.append(mine)
            if not plan.goes_on(answer.tool_calls):  # a text answer ends an agent's rounds
                return True
        return True

    async def _graph(
        self, d: Dispatcher, ids: Iterator[int], s: int, t_ready: int | None, plan: Graph
    ) -> bool:
        """Run graph session ``s``: each call waits for its parents, takes an id, is built with
        their answers, and is sent after its pause (from the last parent's answer; a root's from
        the session's start). A call whose parent failed is not sent (it needs the answer that never came).
        False when the run ran out of ids or time."""
        nodes = plan.nodes(s)
        done = [asyncio.Event() for _ in nodes]
        answers: dict[int, str] = {}
        t0 = now_ns() if t_ready is None else t_ready
        stopped = False

        async def call(k: int, parents: tuple[int, ...]) -> None:
            nonlocal stopped
            try:
                for p in parents:
                    await done[p].wait()
                if stopped or any(p not in answers for p in parents):
                    return
                i = None if d.past_end(now_ns()) else next(ids, None)
                if i is None:
                    stopped = True
                    return
                spec = plan.spec(i, s, k, {p: answers[p] for p in parents})  # built before the pause
                t = (now_ns() if parents else t0) + int(plan.think_s(s, k) * 1e9)
                await sleep_until(t)
                if d.past_end(now_ns()):
                    stopped = True
                    return
                answer = await d.send(i, t, spec)
                if answer is not None:
                    answers[k] = answer.text
            finally:
                done[k].set()

        await run_together(call(k, tuple(p)) for k, p in enumerate(nodes))
        return not stopped
