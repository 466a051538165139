"""The documentation site's reference pages, generated from the code so they cannot drift: every
command and flag (from the argument parser), every profile field with its type, default and
description (from the config models and the comments beside their fields), every metric (from
the registry), the summary's schema and the exit codes.

The site's build hook (``docs/hooks/reference.py``) renders these into ``reference/*.md``; a
test builds the site with ``--strict`` and checks each page names what the code defines.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from loadgen import metric_defs
from loadgen.cli.common import EXIT_CODES
from loadgen.cli.main import build_parser
from loadgen.config import Profile
from loadgen.summary import schema as summary_schema

__all__ = [
    "PAGES",
    "cli_page",
    "exit_codes_page",
    "field_rows",
    "file_page",
    "metrics_page",
    "profile_page",
]


def _cell(text: str) -> str:
    """Text safe inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


# ----------------------------------------------------------------------------- the CLI
def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flag_rows(parser: argparse.ArgumentParser) -> Iterator[str]:
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction | argparse._SubParsersAction):
            continue
        name = ", ".join(f"`{s}`" for s in a.option_strings) or f"`{a.metavar or a.dest}`"
        if a.choices is not None and not a.option_strings:
            name += f" ({', '.join(map(str, a.choices))})"
        default = "" if a.default in (None, argparse.SUPPRESS, False) else f"`{a.default}`"
        said = (a.help or "") % vars(a) if a.help and "%(" in a.help else a.help or ""
        yield f"| {name} | {_cell(said)} | {default} |"


def cli_page() -> str:
    parser = build_parser()
    out = [
        "# Command line",
        "",
        "Generated from loadgen's argument parser.",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
    ]
    for name, sub in _subcommands(parser).items():
        out += ["", f"## `loadgen {name}`", "", _cell(sub.description or ""), "", "```text"]
        out += [
            sub.format_usage().strip(),
            "```",
            "",
            "| argument | what it does | default |",
            "|---|---|---|",
        ]
        out += list(_flag_rows(sub))
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- the profile
def _type_name(t: Any) -> str:
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(t)[0])
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in typing.get_args(t))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(t))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(t))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if t is type(None):
        return "null"
    if isinstance(t, type) and issubclass(t, BaseModel):
        return "section"
    return getattr(t, "__name__", str(t).replace("typing.", ""))


def _models_in(t: Any) -> Iterator[type[BaseModel]]:
    if isinstance(t, type) and issubclass(t, BaseModel):
        yield t
    for a in typing.get_args(t):
        yield from _models_in(a)


def _comments(cls: type[BaseModel]) -> dict[str, str]:
    """Each field's comment in its class's source (or a base class's): the one ending its line,
    else the comment lines directly above it; a per-request SLO's, from the metric registry."""
    said: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is BaseModel or not (isinstance(klass, type) and issubclass(klass, BaseModel)):
            continue
        said.update(_source_comments(klass))
    for name in metric_defs.SLOS:
        if name in cls.model_fields and name not in said:
            said[name] = (
                f"Per-request SLO, ms: {metric_defs.BY_NAME[name].description} "
                "(goodput counts the requests that meet every one)"
            )
    return said


def _source_comments(cls: type[BaseModel]) -> dict[str, str]:
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    said: dict[str, str] = {}
    above: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# ").strip())
            continue
        m = re.match(r"^    (\w+): [^#]*?(?:#\s*(.*))?$", line)
        if m and m.group(1) in cls.model_fields:
            said[m.group(1)] = m.group(2) or " ".join(above)
        above = []
    return said


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel) or (isinstance(value, dict) and not value and field.default_factory):
        return ""
    return f"`{json.dumps(value, default=str)}`"


def _variant(model: type[BaseModel]) -> str:
    """A union member's name: its ``kind`` literal (a length distribution's), else its class."""
    kind = model.model_fields.get("kind")
    if kind is not None and isinstance(kind.default, str):
        return kind.default
    return model.__name__


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of the model's own docstring: ``inspect.getdoc`` would fall back to
    pydantic's ``BaseModel`` text, links to pydantic's pages included, for a model without one."""
    return inspect.cleandoc(model.__dict__.get("__doc__") or "").split("\n\n")[0].replace("\n", " ")


def field_rows(model: type[BaseModel] = Profile, prefix: str = "") -> Iterator[tuple[str, str, str, str]]:
    """(path, type, default, description) of every field of ``model``, sections recursed into;
    a field that takes one of several models (a length distribution) is one row naming them,
    and ``variant_rows`` lists the models' own fields."""
    said = _comments(model)
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        models = list(dict.fromkeys(_models_in(field.annotation)))
        if len(models) > 1:
            kinds = " \\| ".join(_variant(m) for m in models)
            yield path, f"one of: {kinds}", _default(field), said.get(name, "")
            continue
        doc = _doc(models[0]) if models else ""
        yield path, _type_name(field.annotation), _default(field), said.get(name) or doc
        for sub in models:
            yield from field_rows(sub, f"{path}.")


def variant_rows(model: type[BaseModel] = Profile) -> dict[str, list[tuple[str, str, str, str]]]:
    """The models a field may take one of (by the name ``field_rows`` shows), with their rows."""
    out: dict[str, list[tuple[str, str, str, str]]] = {}

    def walk(m: type[BaseModel]) -> None:
        for field in m.model_fields.values():
            models = list(dict.fromkeys(_models_in(field.annotation)))
            for sub in models:
                if len(models) > 1 and _variant(sub) not in out:
                    out[_variant(sub)] = [(p, t, d, s) for p, t, d, s in field_rows(sub) if p != "kind"]
                walk(sub)

    walk(model)
    return out


def profile_page() -> str:
    out = [
        "# Profile fields",
        "",
        "Generated from the configuration models: every field a profile may set, its type, its",
        "default and what it is for. Unknown keys are errors. Any field can be overridden on the",
        "command line with `--set path=value`.",
        "",
        "| field | type | default | description |",
        "|---|---|---|---|",
    ]
    out += [f"| `{p}` | {t} | {d} | {_cell(s)} |" for p, t, d, s in field_rows()]
    out += [
        "",
        "## Fields of each kind",
        "",
        "A field above that takes one of several kinds (a length distribution:",
    ]
    out += ["`{kind: uniform, min: 16, max: 512}`; a bare integer is `fixed`) takes these fields.", ""]
    for kind, rows in variant_rows().items():
        out += [f"### `{kind}`", "", "| field | type | default | description |", "|---|---|---|---|"]
        out += [f"| `{p}` | {t} | {d} | {_cell(s)} |" for p, t, d, s in rows] + [""]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- metrics, summary
def metrics_page() -> str:
    out = [
        "# Metrics",
        "",
        "Generated from the metric registry (`loadgen/metric_defs`): every figure a run reports,",
        "where it sits in `summary.json`, its unit and definition. The full contract is in",
        "[the measurement contract](../metrics.md).",
        "",
        "| metric | summary.json | unit | SLO | definition |",
        "|---|---|---|---|---|",
    ]
    for m in metric_defs.METRICS:
        slo = "yes" if m.name in metric_defs.SLOS else ""
        out.append(f"| `{m.name}` | `{'.'.join(m.path)}` | {m.unit} | {slo} | {_cell(m.description)} |")
    return "\n".join(out) + "\n"


def _schema_rows(node: dict[str, Any], path: str, defs: dict[str, Any], depth: int = 0) -> Iterator[str]:
    if "$ref" in node:
        node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
    for name, sub in (node.get("properties") or {}).items():
        ref = sub.get("$ref") or next((a["$ref"] for a in sub.get("anyOf", []) if "$ref" in a), None)
        target = defs.get(ref.rsplit("/", 1)[-1], {}) if ref else sub
        kind = target.get("type") or (
            "object" if ref else " \\| ".join(a.get("type", "") for a in sub.get("anyOf", []))
        )
        desc = sub.get("description") or target.get("description") or ""
        yield f"| `{path}{name}` | {_cell(kind)} | {_cell(desc)} |"
        if depth < 3 and (target.get("properties") or ref):
            yield from _schema_rows(target, f"{path}{name}.", defs, depth + 1)


# The result files' pages: (schema name, what holds the file).
_FILE_PAGES = {
    "summary": "Every run folder holds one `summary.json`.",
    "capacity": "A `loadgen capacity` run folder holds one `capacity.json` (as summary.json's `capacity`).",
    "experiment": "A `loadgen experiment` folder holds one `experiment.json`, rewritten after every change.",
}


def file_page(name: str) -> Callable[[], str]:
    def page() -> str:
        schema = summary_schema.json_schema(name)
        out = [
            f"# {name}.json",
            "",
            f"Generated from `schemas/{name}.schema.json` (itself generated from the file's types;",
            f"a test keeps it current), four levels deep. {_FILE_PAGES[name]}",
            "",
            "| field | type | description |",
            "|---|---|---|",
        ]
        out += list(_schema_rows(schema, "", schema.get("$defs", {})))
        return "\n".join(out) + "\n"

    return page


def exit_codes_page() -> str:
    out = [
        "# Exit codes",
        "",
        "Every `loadgen` command ends with one of these.",
        "",
        "| code | meaning |",
        "|---|---|",
    ]
    out += [f"| {code} | {_cell(meaning)} |" for code, meaning in EXIT_CODES.items()]
    return "\n".join(out) + "\n"


PAGES = {
    "reference/cli.md": cli_page,
    "reference/profile.md": profile_page,
    "reference/metrics.md": metrics_page,
    **{f"reference/{name}.md": file_page(name) for name in _FILE_PAGES},
    "reference/exit-codes.md": exit_codes_page,
}
