"""Where a workload's requests come from besides synthetic prompts, and how they are shaped.

Production traffic is not unique random words: a dataset gives real prompts and answer lengths,
a trace gives real arrival times, a shared prefix is the system prompt thousands of requests
repeat (which a prefix cache serves from memory), a session is a conversation whose history
grows, and a task set carries the answers a right reply gives. Each is one section of
``workload``; at most one of ``dataset``, ``trace`` and ``tasks`` picks the prompts.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from loadgen.config.base import Int, StrictModel, existing_file, field_msg
from loadgen.config.lengths import MAX_TOKENS, FixedLength, LengthDist

MAX_TURNS = 1000  # per session: past this a history no longer fits any served context
MAX_THINK_S = 86_400.0


class DatasetConfig(StrictModel):
    """Prompts from a local file, never fetched: ShareGPT-format JSON (the first human turn is
    the prompt, the reply after it sets the output length) or JSONL (``prompt``, optional
    ``output_tokens`` and ``expected``). ``output_lengths: profile`` draws output lengths from
    ``workload.output_tokens`` instead (entries without one always do); the filters drop
    entries outside the bounds before the seed orders them."""

    # A local dataset file (ShareGPT JSON or JSONL; never fetched).
    path: str
    # auto (by content), sharegpt or jsonl.
    format: Literal["auto", "sharegpt", "jsonl"] = "auto"
    # data: each entry's own answer length; profile: workload.output_tokens.
    output_lengths: Literal["data", "profile"] = "data"
    match: Literal["exact", "contains"] = "exact"  # how an entry's `expected` is scored
    # Entries with shorter prompts are skipped.
    min_input_tokens: Int = Field(1, ge=1, le=MAX_TOKENS)
    # Entries with longer prompts are skipped.
    max_input_tokens: Int | None = Field(None, ge=1, le=MAX_TOKENS)
    # Entries with shorter answers are skipped.
    min_output_tokens: Int = Field(1, ge=1, le=MAX_TOKENS)
    # Entries with longer answers are skipped.
    max_output_tokens: Int | None = Field(None, ge=1, le=MAX_TOKENS)

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str) -> str:
        existing_file(v, "a local ShareGPT .json or prompts .jsonl file (nothing is downloaded)")
        return v


class TraceConfig(StrictModel):
    """Arrival times and lengths replayed on absolute deadlines: Mooncake JSONL (its
    ``hash_ids`` become prompts sharing exactly those 512-token blocks), Azure LLM inference
    CSV, or loadgen's native JSONL (docs/workloads.md). ``time_scale`` multiplies the trace's
    time (2: twice as long, half the rate); ``start_s``/``window_s`` pick a slice of it in the
    trace's own seconds."""

    # A local trace file of arrival times and lengths (Mooncake, Azure or loadgen's native JSONL).
    path: str
    # auto (by content), mooncake, azure or native.
    format: Literal["auto", "mooncake", "azure", "native"] = "auto"
    # Replay speed: 2 sends the trace twice as fast.
    time_scale: float = Field(1.0, gt=0, le=1e6)
    # Seconds of the trace skipped before the replay starts.
    start_s: float = Field(0.0, ge=0)
    # Seconds of the trace replayed (none: to its end).
    window_s: float | None = Field(None, gt=0)

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str) -> str:
        existing_file(v, "a local trace file: Mooncake .jsonl, Azure .csv or native .jsonl")
        return v


class PrefixConfig(StrictModel):
    """Groups of requests sharing a prompt prefix of ``shared_tokens`` (a system prompt): a
    ``fraction`` of the requests belong to one of ``groups`` (drawn by the seed), the rest
    share nothing. The prefix is counted in the request's input length."""

    # Tokens of a prefix the requests of one group share (a system prompt, a document).
    shared_tokens: Int = Field(0, ge=0, le=MAX_TOKENS)
    # How many distinct shared prefixes.
    groups: Int = Field(1, ge=1, le=1_000_000)
    # Fraction of requests that carry a group's prefix.
    fraction: float = Field(1.0, ge=0, le=1)


class ThinkTime(StrictModel):
    """Seconds a user takes between an answer and their next turn: ``fixed`` (value),
    ``uniform`` (min..max) or ``exponential`` (mean)."""

    # fixed, uniform or exponential.
    kind: Literal["fixed", "uniform", "exponential"] = "fixed"
    # Seconds (fixed).
    value: float = Field(0.0, ge=0, le=MAX_THINK_S)
    # Shortest pause in seconds (uniform).
    min: float = Field(0.0, ge=0, le=MAX_THINK_S)
    # Longest pause in seconds (uniform).
    max: float = Field(0.0, ge=0, le=MAX_THINK_S)
    # Mean pause in seconds (exponential).
    mean: float = Field(0.0, ge=0, le=MAX_THINK_S)

    @model_validator(mode="after")
    def _ordered(self):
        if self.kind == "uniform" and self.max < self.min:
            raise field_msg("max", f"must be >= min ({self.min:g}), got {self.max:g}")
        return self


def seconds_are_fixed(v: object) -> object:
    """A bare number of seconds is a fixed think time (``think_time_s: 2``)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"kind": "fixed", "value": v}
    return v


class SessionsConfig(StrictModel):
    """Multi-turn conversations: each session has ``turns`` turns (a length distribution, e.g.
    ``{kind: uniform, min: 2, max: 8}``); every turn sends the whole history so far (the earlier
    prompts and the answers the server really sent) plus a new user message of
    ``workload.input_tokens``, after a think time. ``load.concurrency`` is then the number of
    sessions running at once, ``load.rate`` the sessions starting per second."""

    # Turns per session (a length distribution of turn counts).
    turns: LengthDist = FixedLength(value=4)
    # The user's pause between an answer and the next turn.
    think_time_s: Annotated[ThinkTime, BeforeValidator(seconds_are_fixed)] = ThinkTime()

    @model_validator(mode="after")
    def _turns_bounded(self):
        t = self.turns
        top = getattr(t, "max", None) or getattr(t, "value", None)
        if top is not None and top > MAX_TURNS:
            raise field_msg("turns", f"at most {MAX_TURNS} turns a session, got {top}")
        return self


class TasksConfig(StrictModel):
    """The built-in task set with exact answers (arithmetic, copy, recall), generated from the
    seed: accuracy beside latency. Answers are scored by each task's own rule."""

    # Which built-in task kinds to draw prompts from (answers scored by each kind's rule).
    kinds: tuple[str, ...] = ("arithmetic", "copy", "recall")

    @field_validator("kinds")
    @classmethod
    def _known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from loadgen.quality.tasks import KINDS

        bad = [k for k in v if k not in KINDS]
        if bad or not v:
            raise ValueError(f"unknown task kind(s) {bad}; choose from {list(KINDS)}")
        return v


class AnswersConfig(StrictModel):
    """Keep each answer's text in requests.jsonl (``answer``, the streamed pieces) so runs can
    be compared for output agreement; at most ``max_chars`` characters of each (the rest is
    cut and ``answer_truncated`` says so). Scoring against expected answers needs no kept text."""

    # Keep each answer's text in requests.jsonl (for output agreement and scoring).
    keep: bool = False
    # Characters of an answer kept.
    max_chars: Int = Field(4096, ge=1, le=1 << 20)
