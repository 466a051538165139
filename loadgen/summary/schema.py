"""summary.json's JSON Schema, generated from the types, and a loaded summary checked against them.

Why generated: the schema used to be written by hand beside the code that writes summaries, and
a test could only catch the fields it happened to exercise. Now ``schemas/summary.schema.json``
is ``json_schema()`` of ``loadgen.summary.Summary`` (``python -m loadgen.summary.schema`` prints
it; ``tests`` fail when the file is stale), so the file users validate against and the types mypy
checks the code against are one thing.

``validate`` checks a summary read from disk (this loadgen's or an earlier one's with the same
``schema_version``) against the types: a wrong type or a missing required block is a
``ResultError`` naming where, instead of a ``KeyError`` deep inside a report. Unknown keys are
allowed (fields are added without a version bump, so a newer file read by an older loadgen
still loads), and the data is returned as read, not as pydantic rebuilt it.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from typing import Any, cast

from pydantic import TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema

from loadgen.errors import ResultError
from loadgen.summary import SCHEMA_VERSION, Summary

SCHEMA_ID = "https://github.com/loadgen/loadgen/schemas/summary.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"


class _Untitled(GenerateJsonSchema):
    """pydantic's generator without the per-field titles it derives from key names (noise in a
    schema whose every field has a description)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


@cache
def _adapter() -> TypeAdapter[Summary]:
    return TypeAdapter(Summary)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of summary.json, with every description on one line and a
    property typed by a block carrying that block's description."""
    schema = _adapter().json_schema(schema_generator=_Untitled)
    defs = schema.get("$defs", {})

    def tidy(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("description"), str):
                node["description"] = " ".join(node["description"].split())
            for sub in (node.get("properties") or {}).values():
                ref = sub.get("$ref")
                if ref and "description" not in sub:
                    sub["description"] = " ".join(defs[ref.rsplit("/", 1)[-1]]["description"].split())
            for value in node.values():
                tidy(value)
        elif isinstance(node, list):
            for value in node:
                tidy(value)

    tidy(schema)
    head = {
        "$schema": DRAFT,
        "$id": SCHEMA_ID,
        "title": f"loadgen summary.json (schema_version {SCHEMA_VERSION})",
    }
    return {**head, **{k: v for k, v in schema.items() if k != "title"}}


def render() -> str:
    """The schema file's text, as committed in ``schemas/summary.schema.json``."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def validate(data: Any, where: str = "summary") -> Summary:
    """``data`` as a ``Summary`` once it matches the types; ``ResultError`` listing (at most five
    of) the places where it does not, each as a path into the file."""
    try:
        _adapter().validate_python(data)
    except ValidationError as e:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors()[:5]
        ]
        more = e.error_count() - len(problems)
        tail = f" (and {more} more)" if more > 0 else ""
        raise ResultError(f"{where} does not match the summary layout: {'; '.join(problems)}{tail}") from None
    return cast(Summary, data)


if __name__ == "__main__":  # python -m loadgen.summary.schema > schemas/summary.schema.json
    sys.stdout.write(render())
