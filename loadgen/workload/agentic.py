"""Agentic sessions from ``workload.agentic``: what each round sends, built from the answers.

Three plans, all deterministic in (seed, session, round) except for what the server said:

- ``SyntheticAgent`` (``tool_rounds``, ``code_session``): round 1 is a task (a system prompt
  shared by every session, then the task's user message); every later round sends the whole
  history so far, then the answer the server really gave (its text, and its tool calls with the
  arguments it streamed), then what the harness adds: one tool result per call, or the next
  instruction after a text answer (``tool_rounds``), or ``messages`` files and logs
  (``code_session``). So the history sent grows by exactly the answers received plus the
  harness's messages, which are drawn, not read from the answers.
- ``AiperfSessions``: AIPerf's multi_turn sessions, each turn after its own ``delay``.
- ``TraceDag``: an OTLP export's LLM calls; a call's recorded input with each parent's recorded
  output replaced by that parent's real answer (``runner.sessions`` runs the DAG).

The pause before a round is the tool's run time (``tool_time_s``) or the trace's delay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from loadgen.config import WorkloadConfig
from loadgen.config.agentic import DEFAULT_TOOLS, MAX_AGENT_ROUNDS, MAX_MESSAGES, AgenticConfig
from loadgen.config.tools import MAX_TOOLS
from loadgen.records import RequestSpec
from loadgen.workload.agentic_traces import AiperfSession, Call, read_aiperf, read_otlp
from loadgen.workload.lengths import sample_lengths
from loadgen.workload.sessions import Turn, draw_think
from loadgen.workload.tool_rounds import tool_messages

__all__ = ["AgentPlan", "AiperfSessions", "SyntheticAgent", "TraceDag", "agentic_plan", "answer_messages"]

# Prompt keys of the harness's texts, far above any request index and apart from tool_rounds'
# (1 << 44), so none repeats another prompt's opening words.
_TASK_KEYS = 1 << 45
_HARNESS_KEYS = 1 << 46
Counter = Callable[[str], int]


def answer_messages(t: Turn, results: Sequence[str]) -> list[dict[str, Any]]:
    """The assistant's message for a finished round (its text; its tool calls, each followed
    by its result)."""
    if t.tool_calls:
        return tool_messages(t.tool_calls, t.answer, results)
    return [{"role": "assistant", "content": t.answer}]


class SyntheticAgent:
    """The shipped generator: tool-call rounds, or a code session's multi-message rounds."""

    def __init__(
        self, cfg: AgenticConfig, work: WorkloadConfig, prompts: Any, system: tuple[Any, int] = (None, 0)
    ) -> None:
        self.cfg, self._work, self._prompts = cfg, work, prompts
        self._system = system if isinstance(system[0], str) else (None, 0)  # sessions send text
        tools = work.tools
        self._tools = (
            (tools.functions if tools is not None else DEFAULT_TOOLS) if cfg.kind == "tool_rounds" else None
        )
        self._choice = tools.tool_choice() if tools is not None else "auto"

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self._work.seed, 30, *key])

    def _draw(self, dist: Any, *key: int) -> int:
        return int(sample_lengths(dist, 1, self._rng(*key))[0])

    def turns(self, s: int) -> int:
        return min(MAX_AGENT_ROUNDS, self._draw(self.cfg.rounds, 0, s))

    def think_s(self, s: int, turn: int) -> float:
        """Seconds the tools (the harness) of round ``turn - 1`` run before round ``turn``."""
        return draw_think(self.cfg.tool_time_s, self._rng(1, s, turn))

    def goes_on(self, calls: Sequence[dict[str, str]]) -> bool:
        """A session runs all its rounds: a text answer gets the next instruction."""
        return True

    def _text(self, key: int, n: int) -> tuple[str, int]:
        text, count = self._prompts.build(key, n)
        return str(text), count

    def task(self, s: int, turn: int) -> tuple[str, int]:
        """The user's message opening round 1, or the next instruction after a text answer."""
        return self._text(
            _TASK_KEYS + s * MAX_AGENT_ROUNDS + turn, self._draw(self._work.input_tokens, 2, s, turn)
        )

    def added(self, s: int, turn: int, t: Turn) -> tuple[list[dict[str, Any]], int]:
        """What follows round ``turn``'s answer ``t`` in the history, and its tokens: the
        answer's message and the harness's messages."""
        base = _HARNESS_KEYS + (s * MAX_AGENT_ROUNDS + turn) * max(MAX_TOOLS, MAX_MESSAGES)
        if self.cfg.kind == "code_session":
            texts = [
                self._text(base + j, self._draw(self.cfg.result_tokens, 3, s, turn, j))
                for j in range(self.cfg.messages)
            ]
            msgs = answer_messages(t, ()) + [{"role": "user", "content": x} for x, _ in texts]
            return msgs, t.answer_tokens + sum(n for _, n in texts)
        if t.tool_calls:
            results = [
                self._text(base + j, self._draw(self.cfg.result_tokens, 3, s, turn, j))
                for j in range(len(t.tool_calls))
            ]
            return answer_messages(t, [x for x, _ in results]), t.answer_tokens + sum(n for _, n in results)
        nxt, n = self.task(s, turn + 1)
        return answer_messages(t, ()) + [{"role": "user", "content": nxt}], t.answer_tokens + n

    def spec(self, i: int, s: int, turn: int, history: Sequence[Turn]) -> tuple[RequestSpec, Turn]:
        """Request ``i``: round ``turn`` of session ``s`` after the rounds in ``history``."""
        system, tokens = self._system
        task, n_task = self.task(s, 1)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": task})
        tokens += n_task
        for k, t in enumerate(history, 1):
            more, n = self.added(s, k, t)
            messages += more
            tokens += n
        n_out = self._draw(self._work.output_tokens, 4, s, turn)
        spec = RequestSpec(
            i,
            task,
            messages,
            tokens,
            n_out,
            session_id=s,
            turn=turn,
            tools=self._tools,
            tool_choice=self._choice if self._tools else None,
        )
        return spec, Turn("", 0, "", 0)


class AiperfSessions:
    """AIPerf multi_turn sessions replayed in file order (cycling): turn ``k`` sends the system
    prompt, every earlier turn's text and the server's answer to it, then turn ``k``'s text."""

    def __init__(
        self, cfg: AgenticConfig, work: WorkloadConfig, sessions: list[AiperfSession], count: Counter
    ) -> None:
        self.cfg, self._work, self._sessions, self._count = cfg, work, sessions, count

    def session(self, s: int) -> AiperfSession:
        return self._sessions[s % len(self._sessions)]

    def turns(self, s: int) -> int:
        return min(MAX_AGENT_ROUNDS, len(self.session(s).turns))

    def think_s(self, s: int, turn: int) -> float:
        """The turn's own delay times ``time_scale``; a turn without one: ``tool_time_s``."""
        delay = self.session(s).turns[turn - 1].delay_s
        if delay is None:
            return draw_think(self.cfg.tool_time_s, np.random.default_rng([self._work.seed, 31, s, turn]))
        return delay * self.cfg.time_scale

    def goes_on(self, calls: Sequence[dict[str, str]]) -> bool:
        return True

    def spec(self, i: int, s: int, turn: int, history: Sequence[Turn]) -> tuple[RequestSpec, Turn]:
        sess = self.session(s)
        now = sess.turns[turn - 1]
        messages: list[dict[str, Any]] = [{"role": "system", "content": sess.system}] if sess.system else []
        tokens = self._count(sess.system) if sess.system else 0
        for t in history:
            messages += [{"role": "user", "content": t.user}, {"role": "assistant", "content": t.answer}]
            tokens += t.user_tokens + t.answer_tokens
        n_user = self._count(now.text)
        messages.append({"role": "user", "content": now.text})
        n_out = now.output_tokens or int(
            sample_lengths(
                self._work.output_tokens, 1, np.random.default_rng([self._work.seed, 32, s, turn])
            )[0]
        )
        spec = RequestSpec(i, now.text, messages, tokens + n_user, n_out, session_id=s, turn=turn)
        return spec, Turn(now.text, n_user, "", 0)


class TraceDag:
    """An OTLP export's traces replayed as DAGs (cycling): ``nodes(s)`` are trace ``s``'s calls'
    parents; ``spec`` builds a call once its parents answered."""

    def __init__(
        self, cfg: AgenticConfig, work: WorkloadConfig, graphs: list[list[Call]], count: Counter
    ) -> None:
        self.cfg, self._work, self._graphs, self._count = cfg, work, graphs, count

    def calls(self, s: int) -> list[Call]:
        return self._graphs[s % len(self._graphs)][:MAX_AGENT_ROUNDS]

    def nodes(self, s: int) -> list[tuple[int, ...]]:
        return [c.parents for c in self.calls(s)]

    def think_s(self, s: int, node: int) -> float:
        """The recorded pause before call ``node`` (after its last parent ended; a root: after
        the trace's first call started), times ``time_scale``."""
        return self.calls(s)[node].delay_s * self.cfg.time_scale

    def spec(self, i: int, s: int, node: int, answers: Mapping[int, str]) -> RequestSpec:
        """Request ``i``: call ``node`` of trace ``s``, each parent's recorded output in its input
        replaced by ``answers[parent]``, the answer the server gave it (output substitution)."""
        calls = self.calls(s)
        call = calls[node]
        messages = []
        for m in call.messages:
            content = m["content"]
            for p in call.parents:
                if calls[p].output and p in answers:
                    content = content.replace(calls[p].output, answers[p])
            messages.append({"role": m["role"], "content": content})
        tokens = sum(self._count(m["content"]) for m in messages)
        n_out = call.output_tokens or int(
            sample_lengths(
                self._work.output_tokens, 1, np.random.default_rng([self._work.seed, 33, s, node])
            )[0]
        )
        last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        return RequestSpec(i, last_user, messages, tokens, n_out, session_id=s, turn=node + 1)


AgentPlan = SyntheticAgent | AiperfSessions | TraceDag


def agentic_plan(work: WorkloadConfig, prompts: Any, system: tuple[Any, int], count: Counter) -> AgentPlan:
    """``workload.agentic``'s plan: generated, or read from its trace file (a TraceError naming
    the file, line or span, and the fix, when the file cannot be used)."""
    cfg = work.agentic
    assert cfg is not None
    if cfg.kind == "aiperf":
        assert cfg.path is not None  # the config requires it of a trace kind
        return AiperfSessions(cfg, work, read_aiperf(cfg.path), count)
    if cfg.kind == "otlp":
        assert cfg.path is not None
        return TraceDag(cfg, work, read_otlp(cfg.path), count)
    return SyntheticAgent(cfg, work, prompts, system)
