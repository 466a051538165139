"""What a request's answer becomes: scored against its expected answer, validated against its
response_format's JSON schema, kept in its record up to
``output.answers``' budget, handed back to a multi-turn shape as the next turn's history; and the
digest of what was asked, by which two runs' answers are paired (``compare``'s agreement)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson

from loadgen.config import Profile
from loadgen.quality.score import score
from loadgen.quality.structured import json_valid, schema_of
from loadgen.records import RequestRecord, RequestSpec
from loadgen.runner.shapes import Answer


@dataclass(frozen=True, slots=True)
class AnswerPolicy:
    """Whether records keep their answer's text (``output.answers``), and at most how much."""

    keep: bool = False
    max_chars: int = 4096


# The default: answers read only where a request needs them (scored, or a session's history).
NO_ANSWERS = AnswerPolicy()


def answer_policy(profile: Profile) -> AnswerPolicy:
    """The policy of a profile's ``output.answers``."""
    a = profile.output.answers
    return AnswerPolicy(a.keep, a.max_chars)


def prompt_hash(spec: RequestSpec) -> str:
    """A digest of exactly what was asked (messages or prompt): two runs' answers are compared
    only where it matches."""
    body = spec.messages if spec.messages is not None else spec.prompt
    h = hashlib.blake2b(orjson.dumps(body), digest_size=8)
    for part in spec.media:  # the same words about another image are another prompt
        h.update(part.payload.encode())
    return h.hexdigest()


def settle_answer(rec: RequestRecord, spec: RequestSpec, policy: AnswerPolicy) -> Answer | None:
    """Score the answer, validate a structured one (``json_valid``), cut what the record keeps
    of it to the budget, and hand the whole text and its tool calls back to the shape (None
    when the request failed or answers are not read)."""
    pieces = rec.answer
    if pieces is None:
        return None
    text = "".join(pieces)
    if rec.ok and spec.expected is not None:
        rec.correct = score(text, spec.expected, spec.match)
    schema = schema_of(spec.response_format)
    if rec.ok and schema is not None:
        rec.json_valid = json_valid(text, schema)
    calls = rec.tool_call_args
    if not policy.keep:
        rec.answer = rec.tool_call_args = None
    elif len(text) > policy.max_chars:
        kept, used = [], 0
        for piece in pieces:
            if used + len(piece) > policy.max_chars:
                break
            kept.append(piece)
            used += len(piece)
        rec.answer, rec.answer_truncated = kept, True
    if not rec.ok:
        return None
    return Answer(text, rec.output_tokens or len(pieces), tuple(calls or ()))
