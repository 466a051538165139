"""Profiles from YAML: the one strict loader, ``--set`` overrides, and validation.

Paths in a profile file are relative to that file, so a profile and its data travel together.
The YAML loader is the project's only one: it rejects duplicate keys (PyYAML keeps the last
one silently); gate rules and the simulator's settings load through it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from loadgen.config.messages import render_validation_error, yaml_error_problem
from loadgen.config.schema import Profile
from loadgen.config.tools import READER
from loadgen.errors import ConfigError

_PATH_KEYS = (
    ("workload", "input_tokens", "file"),
    ("workload", "output_tokens", "file"),
    ("workload", "prompt", "tokenizer"),
    ("workload", "dataset", "path"),
    ("workload", "trace", "path"),
    ("workload", "tools"),  # the shorthand `tools: file.json`
    ("workload", "tools", "file"),
    ("workload", "response_format", "json_schema", "file"),
    ("target", "ca_bundle"),
    ("target", "template_file"),
    ("target", "payloads"),
    ("sim", "preset_file"),  # a fitted twin (loadgen sim fit) beside the profile
)


# Bounds on what one YAML document may expand to. A profile is a few hundred nodes; aliases
# are allowed (anchors keep long profiles short) but counted as what they expand to, so a
# "billion laughs" document is refused before anything is built from it.
MAX_NODES = 100_000
MAX_DEPTH = 64
MAX_BYTES = 8 << 20


class StrictLoader(yaml.SafeLoader):
    """The project's one YAML loader: PyYAML's SafeLoader, plus refusals of duplicate keys
    (PyYAML keeps the last one silently), unhashable keys, recursive aliases, and documents
    that nest deeper than MAX_DEPTH or expand (aliases counted) past MAX_NODES nodes."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set(), 0)
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # PyYAML's value constructors raise plain Python errors for values their tag cannot
        # hold (`!!int abc`, `2024-02-30`, a 5000-digit integer): refused, with the place.
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            kind = node.tag.rsplit(":", 1)[-1]
            raise Refused(f"cannot read this {kind} value ({type(exc).__name__}: {exc})", node) from None


class Refused(yaml.MarkedYAMLError):
    """A well-formed document loadgen will not load (a bomb, a value its tag cannot hold)."""

    def __init__(self, problem: str, node: yaml.Node) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)


def _expanded_size(node: yaml.Node, memo: dict[int, int], path: set[int], depth: int) -> int:
    """Nodes ``node`` stands for once every alias is expanded; raises past the bounds."""
    key = id(node)
    if key in memo:
        return memo[key]
    if depth > MAX_DEPTH:
        raise Refused(f"nested deeper than {MAX_DEPTH} levels", node)
    if key in path:
        raise Refused("an alias refers to a node that contains it (a recursive alias)", node)
    path.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo, path, depth + 1) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(
            _expanded_size(k, memo, path, depth + 1) + _expanded_size(v, memo, path, depth + 1)
            for k, v in node.value
        )
    path.discard(key)
    if size > MAX_NODES:
        raise Refused(
            f"this node expands to more than {MAX_NODES} nodes (aliases counted as what they "
            f"repeat): a document this large is not a profile",
            node,
        )
    memo[key] = size
    return size


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a plain value, not {type(key).__name__}", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


# Byte-order marks, longest first (UTF-32's LE mark begins with UTF-16's).
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
    (b"\xef\xbb\xbf", "utf-8-sig"),
)


def _decode(raw: bytes, source: str | None, what: str) -> str:
    """A profile's text: UTF-8, or UTF-16/32 with a byte-order mark; anything else is refused
    in one line that says how to save the file."""
    encoding = next((enc for bom, enc in _BOMS if raw.startswith(bom)), "utf-8")
    if encoding == "utf-8" and b"\x00" in raw:
        raise ConfigError(
            [
                "not UTF-8 text: the file holds NUL bytes (UTF-16 or UTF-32 without a "
                "byte-order mark?); save it as UTF-8"
            ],
            source,
            what,
        )
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [
                f"not {encoding.upper()} text (byte {exc.start}: "
                f"{raw[exc.start : exc.start + 1]!r}); save the file as UTF-8"
            ],
            source,
            what,
        ) from None


def load_yaml(raw: bytes | str, source: str | None = None, what: str = "profile") -> Any:
    """One YAML document from bytes or text, through ``StrictLoader``; every failure (not
    UTF-8 or UTF-16 text, bad syntax, a bomb, nesting too deep) is a ``ConfigError``."""
    if isinstance(raw, bytes):
        if len(raw) > MAX_BYTES:
            raise ConfigError(
                [f"the file is {len(raw):,} bytes; a {what} is at most {MAX_BYTES:,}"], source, what
            )
        raw = _decode(raw, source, what)
    try:
        return yaml.load(raw, Loader=StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_error_problem(exc)], source, what) from None
    except RecursionError:
        raise ConfigError([f"YAML nested too deeply (at most {MAX_DEPTH} levels)"], source, what) from None


def apply_override(data: dict, dotted: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``dotted == "a.b.c"``, creating mappings on the way."""
    parts = dotted.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ConfigError([f"{dotted}: cannot set it, {where} is {child!r}, not a mapping"])
        node = child
    node[parts[-1]] = value


def parse_set(raw: str) -> tuple[str, Any]:
    key, eq, text = raw.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ConfigError([f"--set {raw!r}: expected key.path=value, e.g. load.rate=8"])
    if key.startswith(("labels.", "target.headers.")) or text == "":
        return key, text  # labels stay verbatim: `--set labels.tp=2` is the label "2"
    try:
        return key, load_yaml(text, what=f"--set {key}")
    except ConfigError:
        return key, text


def _read_yaml(path: Path) -> dict:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError([f"cannot read profile: {exc.strerror or exc}"], source=str(path)) from None
    data = load_yaml(raw, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                f"the top level must be a mapping of sections (target, workload, "
                f"load, sla, ...), got {type(data).__name__}"
            ],
            source=str(path),
        )
    for keys in _PATH_KEYS:
        node: Any = data
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(keys[-1]), str):
            node[keys[-1]] = str(path.parent / Path(node[keys[-1]]).expanduser())
    return data


def _read_data_file(path: str, what: str) -> Any:
    """A data file a profile names (tools, a JSON schema): one JSON or YAML document."""
    try:
        return load_yaml(Path(path).read_bytes(), path, what)
    except (ConfigError, OSError) as exc:
        raise ValueError(str(exc)) from None


def load_profile(
    path: str | Path | None, overrides: Mapping[str, Any] = {}, sets: Sequence[str] = ()
) -> Profile:
    """Read a profile (None: defaults only), apply CLI overrides then ``--set`` strings, validate.

    ``overrides`` maps dotted paths to values (None clears a setting). Setting exactly one of
    ``load.rate`` / ``load.concurrency`` clears the other, so ``--rate 8`` turns a closed-loop
    profile into an open-loop one.
    """
    source = str(path) if path is not None else None
    data = _read_yaml(Path(path)) if path is not None else {}
    changes = list(overrides.items()) + [parse_set(s) for s in sets]
    try:
        for dotted, value in changes:
            apply_override(data, dotted, value)
    except ConfigError as err:
        raise ConfigError(err.problems, source=source) from None
    chosen = {k for k, v in changes if k in ("load.rate", "load.concurrency") and v is not None}
    if len(chosen) == 1:
        other = ({"load.rate", "load.concurrency"} - chosen).pop()
        if other not in dict(changes):
            apply_override(data, other, None)
    try:
        load = data.get("load") if isinstance(data, dict) else None
        staged = isinstance(load, dict) and bool(load.get("stages") or load.get("sweep"))
        work = data.get("workload") if isinstance(data, dict) else None
        trace = isinstance(work, dict) and work.get("trace") is not None
        context = {"staged": staged, "trace": trace, READER: _read_data_file}
        return Profile.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(render_validation_error(exc, Profile), source=source) from None


def profile_to_yaml(profile: Profile) -> str:
    """The resolved profile as YAML, rules written back as strings."""
    data = profile.resolved()
    data["sla"]["rules"] = [r.text() for r in profile.sla.rules]
    return yaml.safe_dump(data, sort_keys=False)
