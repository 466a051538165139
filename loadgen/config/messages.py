"""Profile validation errors rendered for people: YAML paths, what was wrong, what is valid.

pydantic reports ``loc`` tuples and its own wording; these turn each error into one line such
as ``load.arrival: 'possion' is not one of poisson, constant, gamma`` or
``target.urll: unknown key; did you mean url? valid keys here: ...``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError


def yaml_error_problem(exc: yaml.YAMLError) -> str:
    """One line for a YAML failure: where, and what (a syntax error, or a refused document)."""
    mark, what, syntax = None, str(exc), False
    if isinstance(exc, yaml.MarkedYAMLError):
        mark, what = exc.problem_mark, exc.problem or str(exc)
        # Refusals (a bomb, a value its tag cannot hold) are well-formed YAML, not syntax.
        syntax = type(exc).__name__ != "Refused"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    kind = "YAML syntax error" if syntax else "YAML refused"
    return f"{where}{kind}: {what.splitlines()[0] if what else type(exc).__name__}"


def _unwrap(tp: Any) -> Any:
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, UnionType) and sum(a is not type(None) for a in get_args(tp)) == 1:
            tp = next(a for a in get_args(tp) if a is not type(None))
        else:
            return tp


def _tags(tp: Any) -> dict[str, type] | None:
    """For a union of models discriminated by ``kind``: tag -> model, in declaration order."""
    if get_origin(tp) not in (Union, UnionType):
        return None
    out = {}
    for member in get_args(tp):
        if not (isinstance(member, type) and issubclass(member, BaseModel)):
            return None
        out[get_args(member.model_fields["kind"].annotation)[0]] = member
    return out


def _walk(root: type, loc: tuple) -> tuple[str, Any]:
    """Turn pydantic's ``loc`` into a YAML path (union tags dropped), plus the type found there."""
    tp: Any = root
    path = ""
    for part in loc:
        tp = _unwrap(tp)
        tags = _tags(tp)
        if tags is not None and part in tags:
            tp = tags[part]
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            tp = field.annotation if field else None
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        elif get_origin(tp) in (tuple, list):
            tp = get_args(tp)[0]
        else:
            tp = None
    return path, _unwrap(tp)


def _show(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


_EXPECTED = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "dict": "a mapping",
    "list": "a list",
    "tuple": "a list",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _message(err: Mapping[str, Any], path: str, tp: Any, root: type) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    tags = _tags(tp)
    if kind == "extra_forbidden":
        _, parent = _walk(root, err["loc"][:-1])
        valid = (
            list(parent.model_fields) if isinstance(parent, type) and issubclass(parent, BaseModel) else []
        )
        near = difflib.get_close_matches(str(err["loc"][-1]), valid, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        return f"{path}: unknown key; {hint}valid keys here: {', '.join(valid)}"
    if kind == "missing":
        return f"{path}: required but missing"
    if kind == "literal_error":
        valid = [str(a) for a in get_args(tp)] if get_origin(tp) is Literal else [ctx["expected"]]
        return f"{path}: {_show(got)} is not one of {', '.join(valid)}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        names = ", ".join(tags or ())
        if kind == "union_tag_not_found":
            return f"{path}.kind: missing; valid: {names}"
        return f"{path}.kind: unknown {ctx.get('tag')!r}; valid: {names}"
    if tags is not None:
        return (
            f"{path}: expected an integer (a fixed length) or a mapping with kind: "
            f"{', '.join(tags)}; got {_show(got)}"
        )
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        return f"{path}: must be {_BOUNDS[kind]} {bound}, got {_show(got)}"
    if kind in ("model_type", "model_attributes_type"):
        return f"{path}: expected a mapping (key: value lines), got {_show(got)}"
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        if msg.startswith("@"):
            field, _, msg = msg[1:].partition(": ")
            # A check on the whole profile names its section itself: no "(top level)." before it.
            path = f"{path}.{field}" if path and path != TOP else field
        return f"{path}: {msg}" if path else msg
    base = kind.split("_")[0]
    if base in _EXPECTED:
        return f"{path}: expected {_EXPECTED[base]}, got {_show(got)}"
    return f"{path}: {err['msg']}" + (f" (got {_show(got)})" if "input" in err else "")


TOP = "(top level)"


def render_validation_error(exc: ValidationError, root: type) -> list[str]:
    """One friendly line per pydantic error, each starting with its dotted YAML path."""
    out = []
    for err in exc.errors(include_url=False):
        path, tp = _walk(root, err["loc"])
        line = _message(err, path or TOP, tp, root)
        if line not in out:
            out.append(line)
    return out
