"""Multi-turn sessions: how many turns a conversation has, how long its user thinks, and what
each turn sends.

A turn sends the whole conversation so far: every earlier user message and the answer the
server really streamed for it, then the new user message. That is what a chat product sends,
and what makes later turns cheap on a server with a prefix cache (their history is cached).
The plan is deterministic in (seed, session, turn); the history is whatever the server said.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from loadgen.backends import registry
from loadgen.config import WorkloadConfig
from loadgen.config.traffic import MAX_TURNS, SessionsConfig, ThinkTime
from loadgen.records import RequestSpec
from loadgen.workload.lengths import sample_lengths
from loadgen.workload.prompts import chat_messages

__all__ = ["SessionPlan", "Turn", "draw_think"]


def draw_think(t: ThinkTime, rng: np.random.Generator) -> float:
    """One pause of ``t``'s distribution in seconds, drawn from ``rng`` (a fixed one draws
    nothing): a user's think time, or a tool's run time between an answer and the next round."""
    if t.kind == "fixed":
        return t.value
    if t.kind == "uniform":
        return float(rng.uniform(t.min, t.max))
    return float(rng.exponential(t.mean)) if t.mean > 0 else 0.0


class Turn:
    """One finished turn of a session: what the user said and what the server answered (its
    text, and the tool calls it made: id, name, arguments)."""

    __slots__ = ("user", "user_tokens", "answer", "answer_tokens", "tool_calls")

    def __init__(self, user: str, user_tokens: int, answer: str, answer_tokens: int) -> None:
        self.user, self.user_tokens = user, user_tokens
        self.answer, self.answer_tokens = answer, answer_tokens
        self.tool_calls: tuple[dict[str, str], ...] = ()


class SessionPlan:
    """Turns, think times and messages of session ``s``; ``spec`` builds a turn's request."""

    def __init__(
        self,
        cfg: SessionsConfig,
        work: WorkloadConfig,
        prompts: Any,
        endpoint: str,
        shared: Callable[[int], tuple[Any, int]] = lambda s: (None, 0),
    ) -> None:
        """``shared(s)``: the prefix session ``s`` opens with (its group's system prompt)."""
        self.cfg, self._work, self._prompts = cfg, work, prompts
        backend = registry.get(endpoint)  # a protocol of messages (chat, responses, messages)?
        self._chat = backend is not None and backend.messages
        self._shared = shared

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self._work.seed, *key])

    def turns(self, s: int) -> int:
        return min(MAX_TURNS, int(sample_lengths(self.cfg.turns, 1, self._rng(14, s))[0]))

    def goes_on(self, calls: Sequence[dict[str, str]]) -> bool:
        """A session runs all its turns, whatever an answer was."""
        return True

    def think_s(self, s: int, turn: int) -> float:
        """Seconds between the answer to ``turn - 1`` and the sending of ``turn``."""
        return draw_think(self.cfg.think_time_s, self._rng(15, s, turn))

    def lengths(self, s: int, turn: int) -> tuple[int, int]:
        """(new user message tokens, output tokens) of a turn."""
        rng = self._rng(13, s, turn)
        n_in = int(sample_lengths(self._work.input_tokens, 1, rng)[0])
        return n_in, int(sample_lengths(self._work.output_tokens, 1, rng)[0])

    def user(self, s: int, turn: int) -> tuple[str, int]:
        n_in, _ = self.lengths(s, turn)
        text, n = self._prompts.build(s * MAX_TURNS + turn, n_in)
        return str(text), n

    def spec(self, i: int, s: int, turn: int, history: Sequence[Turn]) -> tuple[RequestSpec, Turn]:
        """Request ``i``: turn ``turn`` of session ``s`` after ``history``; and the turn's user
        part (its answer is filled in once the server sent it)."""
        user, n_user = self.user(s, turn)
        _, n_out = self.lengths(s, turn)
        system, n_sys = self._shared(s)
        system = system if isinstance(system, str) else None  # sessions send text
        tokens = n_sys + n_user + sum(t.user_tokens + t.answer_tokens for t in history)
        messages = None
        if self._chat:
            messages = chat_messages(user, system)
            past = []
            for t in history:
                past += [{"role": "user", "content": t.user}, {"role": "assistant", "content": t.answer}]
            messages[-1:-1] = past
            prompt = user
        else:
            parts = [system] if system else []
            for t in history:
                parts += [t.user, t.answer.strip()]
            prompt = " ".join([*parts, user])
        spec = RequestSpec(i, prompt, messages, tokens, n_out, session_id=s, turn=turn)
        return spec, Turn(user, n_user, "", 0)
