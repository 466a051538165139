"""Agentic rounds: sessions whose next request is built from the last answer.

An agent does not type: it calls a tool, waits for it, and sends the whole history back with
the result, or it is a coding harness that appends a file, a diff and a test log to the
conversation after each answer. What loads the server is the history that grows by exactly what
the server answered, and the pauses (the tools' run times) in between, which decide how long a
prefix cache must keep a session's blocks. ``workload.agentic`` makes such sessions from a
shipped generator (``tool_rounds``, ``code_session``) or replays them from a trace file
(``aiperf``: AIPerf's multi_turn JSONL; ``otlp``: an OpenTelemetry trace export, its LLM spans a
DAG replayed with each parent's recorded output replaced by the server's real answer).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from loadgen.config.base import Int, StrictModel, existing_file, field_msg
from loadgen.config.lengths import FixedLength, LengthDist
from loadgen.config.traffic import ThinkTime, seconds_are_fixed

MAX_AGENT_ROUNDS = 256  # rounds of one session, or LLM calls of one trace
MAX_MESSAGES = 64  # messages a code session's harness adds a round

SYNTHETIC = ("tool_rounds", "code_session")
TRACES = ("aiperf", "otlp")
AgenticKind = Literal["tool_rounds", "code_session", "aiperf", "otlp"]

# The tools a synthetic tool_rounds session offers when workload.tools lists none: a coding
# agent's usual three, so a server's tool-call path is exercised without a tools file.
DEFAULT_TOOLS: tuple[dict[str, Any], ...] = tuple(
    {
        "type": "function",
        "function": {
            "name": name,
            "description": what,
            "parameters": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]},
        },
    }
    for name, what, arg in (
        ("read_file", "Read a file of the repository", "path"),
        ("run_command", "Run a shell command in the repository", "command"),
        ("search_code", "Search the repository for a pattern", "pattern"),
    )
)


class AgenticConfig(StrictModel):
    """``kind``: ``tool_rounds`` (each answer's tool calls are answered with results, a text
    answer with the next instruction), ``code_session`` (after each answer the harness appends
    ``messages`` messages: files, diffs, test logs), or a trace: ``aiperf`` / ``otlp`` at
    ``path``. ``rounds``: a synthetic session's rounds (a length distribution);
    ``tool_time_s``: the pause between an answer and the next round (the tool's or harness's
    run time; a trace's own delays take its place, times ``time_scale``); ``result_tokens``:
    each tool result's or harness message's length."""

    # tool_rounds, code_session (synthetic), aiperf or otlp (a trace file at path).
    kind: AgenticKind = "tool_rounds"
    # Rounds of a synthetic session (a length distribution of counts).
    rounds: LengthDist = FixedLength(value=4)
    # Seconds between an answer and the next round (a tool's run time): fixed, uniform, exponential.
    tool_time_s: Annotated[ThinkTime, BeforeValidator(seconds_are_fixed)] = ThinkTime()
    # Tokens of each tool result (tool_rounds) or harness message (code_session).
    result_tokens: LengthDist = FixedLength(value=64)
    # Messages a code session's harness appends after each answer.
    messages: Int = Field(2, ge=1, le=MAX_MESSAGES)
    # A trace file (aiperf: multi_turn JSONL; otlp: an OTLP JSON export), relative to the profile.
    path: str | None = None
    # Multiplies a trace's recorded delays (0.5: half as long).
    time_scale: float = Field(1.0, ge=0, le=1e6)

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str | None) -> str | None:
        return existing_file(v, "an AIPerf multi_turn .jsonl or an OTLP JSON trace export")

    @model_validator(mode="after")
    def _source_fits_kind(self):
        if self.kind in TRACES and self.path is None:
            raise field_msg("path", f"kind {self.kind} replays a trace file; give its path")
        if self.kind in SYNTHETIC and self.path is not None:
            raise field_msg("path", f"kind {self.kind} is generated; a trace is kind aiperf or otlp")
        top = getattr(self.rounds, "max", None) or getattr(self.rounds, "value", None)
        if top is not None and top > MAX_AGENT_ROUNDS:
            raise field_msg("rounds", f"at most {MAX_AGENT_ROUNDS} rounds a session, got {top}")
        return self


def check_workload(work: Any) -> None:
    """What ``workload.agentic`` cannot share a workload with (it builds its own prompts and
    sessions); a ValueError naming the field to remove."""
    a = work.agentic
    if a is None:
        return
    for key in ("sessions", "dataset", "trace", "tasks", "models", "images", "audio", "response_format"):
        if getattr(work, key) is not None:
            raise field_msg(
                key, f"agentic sessions build their own requests; remove workload.{key} or agentic"
            )
    if work.tools is not None and a.kind != "tool_rounds":
        raise field_msg("tools", f"only agentic kind tool_rounds offers tools, not {a.kind}; remove one")
