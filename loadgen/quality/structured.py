"""Structured output's quality: is an answer JSON, and valid against the schema it was asked for?

A server that serves ``response_format: json_schema`` is only as good as the share of answers a
program can use: one that drops a required key or stops mid-object fails the program reading
it however fast it streamed. So each answer is parsed and validated (jsonschema, the schema's
own draft), and ``summary.quality.json_valid`` is the valid share of the scored answers.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson

# One compiled validator per schema object a run asks with (a run has one, or a few).
_VALIDATORS: dict[int, tuple[Any, Any]] = {}


def _validator(schema: dict[str, Any]) -> Any:
    held = _VALIDATORS.get(id(schema))
    if held is None or held[0] is not schema:
        cls = jsonschema.validators.validator_for(schema)
        held = (schema, cls(schema))
        if len(_VALIDATORS) > 64:
            _VALIDATORS.clear()
        _VALIDATORS[id(schema)] = held
    return held[1]


def schema_of(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a request's ``response_format`` asks for; None when it asks for none."""
    if not response_format or response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema")
    return schema if isinstance(schema, dict) else None


def json_valid(text: str, schema: dict[str, Any]) -> bool:
    """Whether ``text`` is one JSON value (surrounding whitespace allowed) valid against ``schema``."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return bool(_validator(schema).is_valid(value))
