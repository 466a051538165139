"""What the simulator answers a request with ``tools`` or a ``response_format`` JSON schema.

A tool call: the function named by ``tool_choice`` (else one of the tools, drawn from the
prompt's seed), streamed as OpenAI does: its first token names the call, each later token is a
piece of ``function.arguments``, a JSON object built from the function's parameter schema. A
structured answer: content tokens that spell a JSON value built from the schema. Either way the
JSON is exactly the request's output tokens long (the first free string property is filled with
words; without one, whitespace pads it), so the token counts stay the engine's. The pseudo-EOS
never cuts a JSON value short (guided decoding allows no end of text inside one): the output is
at least the value's fewest tokens, and only ``max_tokens`` cuts it (finish_reason ``length``,
invalid). A ``json_invalid_rate`` share
of the structured answers is broken on purpose (its last piece turns into a comma), so a
client's validity rate can be checked against the ground-truth log's ``json_valid``.

The JSON is built by hand from the schema's ``type``, ``properties``, ``enum``/``const``,
``minimum`` and ``minItems``: enough for the schemas an agent's tools carry, with no client code.
"""

from __future__ import annotations

import random
import re
from typing import Any

import orjson

from .text import WORDS

_PAD = "QQpadQQ"  # stands for the string the words fill; no schema value spells it
_PIECE = re.compile(r"\w+|\s+|[^\w\s]+")


def _example(schema: Any, free: list[bool]) -> Any:
    """A value valid against ``schema``; the first unconstrained string is ``_PAD``."""
    if not isinstance(schema, dict):
        return ""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _example(v, free) for k, v in props.items()}
    if kind == "array":
        return [_example(schema.get("items"), free) for _ in range(int(schema.get("minItems", 0)))]
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if not free[0] and "maxLength" not in schema and "pattern" not in schema and "format" not in schema:
        free[0] = True
        return _PAD
    return "x" * int(schema.get("minLength", 1))


def _pieces(text: str) -> list[str]:
    return _PIECE.findall(text)


def min_pieces(schema: Any) -> int:
    """The fewest tokens a JSON value valid against ``schema`` takes here (its free string empty)."""
    free = [False]
    text = orjson.dumps(_example(schema, free)).decode()
    return sum(len(_pieces(part)) for part in text.split(_PAD, 1)) if free[0] else len(_pieces(text))


def json_pieces(schema: Any, n: int, rng: random.Random) -> tuple[list[str], bool]:
    """``n`` token pieces of a JSON value valid against ``schema``, and whether it is complete
    (False: ``n`` was too few, and the value is cut)."""
    free = [False]
    text = orjson.dumps(_example(schema, free)).decode()
    if free[0]:
        left, right = text.split(_PAD, 1)
        head, tail = _pieces(left), _pieces(right)
    else:
        head, tail = _pieces(text)[:-1], _pieces(text)[-1:]
    short = n - len(head) - len(tail)
    if short < 0:
        return (head + tail)[:n], False
    start = rng.randrange(len(WORDS))
    fill = [WORDS[(start + i) % len(WORDS)] for i in range(short)] if free[0] else [" "] * short
    if fill and free[0]:
        fill[0] = fill[0].lstrip()
    return head + fill + tail, True


def broken(pieces: list[str]) -> list[str]:
    """The same number of pieces, no longer JSON: the last one ends in a comma instead."""
    last = pieces[-1]
    return [*pieces[:-1], (last[:-1] + ",") if len(last) > 1 else ","]


def asked_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema of a ``response_format: {type: json_schema}``; None when none is asked."""
    rf = body.get("response_format")
    if not isinstance(rf, dict) or rf.get("type") != "json_schema":
        return None
    schema = (rf.get("json_schema") or {}).get("schema") if isinstance(rf.get("json_schema"), dict) else None
    return schema if isinstance(schema, dict) else {}


def tool_to_call(body: dict[str, Any], rng: random.Random, rate: float) -> dict[str, Any] | None:
    """The function (OpenAI tool's ``function`` object) the answer calls; None: it answers text
    (no tools, ``tool_choice: none``, a tool's result to answer, or the draw under ``rate``)."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    msgs = body.get("messages")
    if isinstance(msgs, list) and msgs and isinstance(msgs[-1], dict) and msgs[-1].get("role") == "tool":
        return None
    fns = [t["function"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    choice = body.get("tool_choice", "auto")
    if choice == "none" or not fns:
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((f for f in fns if f.get("name") == name), None)
    if choice != "required" and rng.random() >= rate:
        return None
    return fns[rng.randrange(len(fns))]
