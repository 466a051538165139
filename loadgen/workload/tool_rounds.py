"""Tool rounds: an agent's conversation, where a tool call is answered with the tool's result.

Round 1 is the workload's request for the conversation (its prompt, the tools, the
tool_choice). When the answer is a tool call and rounds are left, the next round sends the
same messages plus the assistant's message with its ``tool_calls`` (id, name and the
arguments the server really streamed) and one ``role: tool`` message per call: a mocked
result of ``tools.result_tokens`` tokens, deterministic in (seed, conversation, round, call).
The answer to that is what a tool-using agent waits for; a text answer ends the conversation.
Every round is a record with its turn number; conversations run as sessions do
(``runner.sessions``), each round after ``tools.think_time_s``: the tool's run time, drawn in
(seed, conversation, round), not a user's pause.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from loadgen.config.tools import MAX_ROUNDS, MAX_TOOLS, ToolsConfig
from loadgen.records import RequestSpec
from loadgen.workload.sessions import Turn, draw_think

# Tool results' texts are drawn from keys far above any request index, so none repeats a prompt.
_RESULT_KEYS = 1 << 44


def tool_messages(
    calls: Sequence[dict[str, str]], answer: str, results: Sequence[str]
) -> list[dict[str, Any]]:
    """The assistant's tool-call message and one ``role: tool`` result message per call."""
    assistant = {
        "role": "assistant",
        "content": answer or None,
        "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ],
    }
    return [
        assistant,
        *({"role": "tool", "tool_call_id": c["id"], "content": r} for c, r in zip(calls, results)),
    ]


class ToolRounds:
    """The plan of tool-round conversations: ``spec`` builds round ``turn`` of conversation
    ``s``; ``goes_on`` says whether an answer calls for another round."""

    def __init__(
        self, cfg: ToolsConfig, first: Callable[[int], RequestSpec], prompts: Any, seed: int = 0
    ) -> None:
        """``first(s)``: conversation ``s``'s round-1 request (the workload's request ``s``)."""
        self.cfg, self._first, self._prompts, self._seed = cfg, first, prompts, seed

    def turns(self, s: int) -> int:
        return self.cfg.rounds

    def think_s(self, s: int, turn: int) -> float:
        """Seconds the tools of round ``turn - 1`` run before round ``turn`` is sent."""
        return draw_think(self.cfg.think_time_s, np.random.default_rng([self._seed, 16, s, turn]))

    def goes_on(self, calls: Sequence[dict[str, str]]) -> bool:
        """Another round follows an answer that called a tool, and only such an answer."""
        return bool(calls)

    def result(self, s: int, turn: int, call: int) -> tuple[str, int]:
        """The mocked result of call ``call`` of round ``turn`` of conversation ``s``: its text
        and tokens (``result_tokens``)."""
        key = _RESULT_KEYS + (s * MAX_ROUNDS + turn) * MAX_TOOLS + call
        text, n = self._prompts.build(key, self.cfg.result_tokens)
        return str(text), n

    def spec(self, i: int, s: int, turn: int, history: Sequence[Turn]) -> tuple[RequestSpec, Turn]:
        """Request ``i``: round ``turn`` of conversation ``s`` after the rounds in ``history``."""
        first = self._first(s)
        messages = list(first.messages or ())
        tokens = first.prompt_tokens
        for k, t in enumerate(history, 1):
            results = [self.result(s, k, j) for j in range(len(t.tool_calls))]
            messages += tool_messages(t.tool_calls, t.answer, [r for r, _ in results])
            tokens += t.answer_tokens + sum(n for _, n in results)
        spec = replace(first, id=i, messages=messages, prompt_tokens=tokens, session_id=s, turn=turn)
        return spec, Turn("", 0, "", 0)
