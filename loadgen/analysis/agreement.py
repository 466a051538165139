"""Output agreement between two runs on the same prompts: did FP8 answer what FP16 answered,
did engine B say what engine A said?

Requests are paired by id and compared only when they were sent the same prompt (the same
``prompt_hash``): a multi-turn session whose earlier answers diverged sends different histories
later, and comparing those answers would blame the model for the client's divergence.

Answers are kept as the streamed pieces, in order. On vLLM and SGLang one streamed chunk carries
one token, so a count of pieces is a count of tokens; on servers that merge tokens into chunks it
is a count of chunks. An answer may be truncated to the run's character budget; a pair where
either side was is compared on what was kept (see ``agreement``).

Reads requests.jsonl line by line with orjson: answers can be large, and a compare never needs
a DataFrame.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

_EXAMPLES = 5  # first_differences kept for a report
_EXAMPLE_CHARS = 80


@dataclass(frozen=True, slots=True)
class Answer:
    """One request's answer as a run kept it."""

    prompt_hash: str | None
    pieces: tuple[str, ...]  # the content text as streamed, chunk by chunk
    truncated: bool  # the pieces stop at the run's answer budget, not at the answer's end


def read_answers(requests_jsonl: Path) -> dict[int, Answer]:
    """The answers of a run's measured requests, by request id: warm-up requests, failed ones
    and ones without a kept answer are left out. A last line that does not parse is a killed
    run's torn write and is skipped; one anywhere else is damage and a ValueError naming it."""
    out: dict[int, Answer] = {}
    torn: int | None = None
    with open(requests_jsonl, "rb") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if torn is not None:
                raise ValueError(f"{requests_jsonl}:{torn}: not a JSON record")
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                torn = n
                continue
            if not isinstance(rec, dict):
                raise ValueError(f"{requests_jsonl}:{n}: not a JSON record")
            answer = rec.get("answer")
            if rec.get("warmup") or not rec.get("ok") or answer is None:
                continue
            out[int(rec["id"])] = Answer(
                rec.get("prompt_hash"), tuple(answer), bool(rec.get("answer_truncated", False))
            )
    return out


def common_prefix_tokens(a: Sequence[str], b: Sequence[str]) -> int:
    """How many leading pieces of ``a`` agree with ``b``, counted so that chunking does not
    matter: the texts are compared character by character, and a piece of ``a`` counts when it
    lies wholly inside their common character prefix. ``["The", " cat"]`` against
    ``["The c", "at"]`` is 2 (the same text); against ``["The", " dog"]`` it is 1."""
    ta, tb = "".join(a), "".join(b)
    common = 0
    for x, y in zip(ta, tb):
        if x != y:
            break
        common += 1
    count = end = 0
    for piece in a:
        end += len(piece)
        if end > common:
            break
        count += 1
    return count


def _same(a: Answer, b: Answer) -> bool:
    """Exact text equality, on what was kept: a truncated side is known only up to its length,
    so both texts are cut to the shortest truncated length before comparing. An untruncated
    answer shorter than that cut differs (it ended where the other went on)."""
    ta, tb = "".join(a.pieces), "".join(b.pieces)
    cuts = [len(t) for t, x in ((ta, a), (tb, b)) if x.truncated]
    if cuts:
        cut = min(cuts)
        return ta[:cut] == tb[:cut]
    return ta == tb


def agreement(a: Mapping[int, Answer], b: Mapping[int, Answer]) -> dict[str, Any]:
    """How often run ``b`` answered exactly as run ``a`` did, over requests both made with the
    same prompt (same ``prompt_hash``, or both unknown).

    compared                     ids in both runs with the same prompt
    identical                    of those, pairs whose texts are exactly equal (no normalisation)
    agreement                    identical / compared, or None when nothing was compared
    mean_common_prefix_tokens    mean ``common_prefix_tokens(a, b)``: how far answers run together
    mean_answer_tokens           mean pieces of ``a``'s answers, the scale for the prefix
    prompts_differ               ids in both sent different prompts (not compared)
    only_in_one                  ids in one run only (not compared)
    truncated                    compared pairs where either side was truncated: compared on
                                 what was kept
    first_differences            up to 5 non-identical pairs by id: {"id", "a", "b"}, first 80
                                 characters of each text
    """
    compared = identical = truncated = prompts_differ = prefix = answer_tokens = 0
    differences: list[dict[str, Any]] = []
    for i in sorted(a.keys() & b.keys()):
        x, y = a[i], b[i]
        if x.prompt_hash != y.prompt_hash:
            prompts_differ += 1
            continue
        compared += 1
        truncated += x.truncated or y.truncated
        prefix += common_prefix_tokens(x.pieces, y.pieces)
        answer_tokens += len(x.pieces)
        if _same(x, y):
            identical += 1
        elif len(differences) < _EXAMPLES:
            differences.append(
                {
                    "id": i,
                    "a": "".join(x.pieces)[:_EXAMPLE_CHARS],
                    "b": "".join(y.pieces)[:_EXAMPLE_CHARS],
                }
            )
    return {
        "compared": compared,
        "identical": identical,
        "agreement": identical / compared if compared else None,
        "mean_common_prefix_tokens": prefix / compared if compared else None,
        "mean_answer_tokens": answer_tokens / compared if compared else None,
        "prompts_differ": prompts_differ,
        "only_in_one": len(a.keys() ^ b.keys()),
        "truncated": truncated,
        "first_differences": differences,
    }
