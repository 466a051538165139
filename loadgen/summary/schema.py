"""The result files' JSON Schemas (summary.json, capacity.json, experiment.json), generated from
their types, and a loaded summary checked against them.

Why generated: the schema used to be written by hand beside the code that writes summaries, and
a test could only catch the fields it happened to exercise. Now ``schemas/summary.schema.json``
is ``json_schema()`` of ``loadgen.summary.Summary`` (``python -m loadgen.summary.schema`` prints
it; ``tests`` fail when the file is stale), so the file users validate against and the types mypy
checks the code against are one thing. ``schemas/capacity.schema.json`` (``Capacity``) and
``schemas/experiment.schema.json`` (``ExperimentFile``) are made the same way, from ``FILES``
(``python -m loadgen.summary.schema capacity`` prints one).

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
from loadgen.summary import SCHEMA_VERSION, Capacity, Summary
from loadgen.summary.experiment import ExperimentFile

SCHEMA_ID = "https://github.com/loadgen/loadgen/schemas/summary.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
# Each result file with a schema: its name in schemas/ (<name>.schema.json), its type, its title.
FILES: dict[str, tuple[Any, str]] = {
    "summary": (Summary, f"loadgen summary.json (schema_version {SCHEMA_VERSION})"),
    "capacity": (Capacity, "loadgen capacity.json (a `loadgen capacity` search's result)"),
    "experiment": (ExperimentFile, "loadgen experiment.json (loadgen-experiment/1)"),
}


class _Untitled(GenerateJsonSchema):
    """pydantic's generator without the per-field titles it derives from key names (noise in a
    schema whose every field has a description)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


@cache
def _adapter() -> TypeAdapter[Summary]:
    return TypeAdapter(Summary)


def json_schema(name: str = "summary") -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the result file ``name`` (a key of ``FILES``), with
    every description on one line and a property typed by a block carrying that block's
    description."""
    kind, title = FILES[name]
    adapter = _adapter() if kind is Summary else TypeAdapter(kind)
    schema = adapter.json_schema(schema_generator=_Untitled)
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
    head = {"$schema": DRAFT, "$id": SCHEMA_ID.replace("summary", name), "title": title}
    return {**head, **{k: v for k, v in schema.items() if k != "title"}}


def render(name: str = "summary") -> str:
    """The schema file's text, as committed in ``schemas/<name>.schema.json``."""
    return json.dumps(json_schema(name), indent=2, ensure_ascii=False) + "\n"


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


if __name__ == "__main__":  # python -m loadgen.summary.schema [NAME] > schemas/NAME.schema.json
    sys.stdout.write(render(sys.argv[1] if len(sys.argv) > 1 else "summary"))
