"""Prompt datasets read from local files: ShareGPT conversations and JSONL prompt lists.

Nothing is ever fetched: a benchmark that downloads its inputs at run time measures whatever the
mirror served that day. Files are validated on the way in, and every error names the file, the
line (JSONL) or entry index (JSON), the field and the fix, because a 600 MB ShareGPT dump with
one bad entry is otherwise a needle in a haystack. The file formats: docs/workloads.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

from loadgen.errors import LoadgenError
from loadgen.workload.media_files import MediaRef, read_media

__all__ = ["Dataset", "DatasetError", "Entry", "load_dataset", "select", "word_count"]

# The speaker names ShareGPT dumps use; vLLM's benchmark only looks at turn positions, we look at
# who speaks so a leading system turn does not become "the prompt".
HUMAN = frozenset({"human", "user"})
ASSISTANT = frozenset({"gpt", "chatgpt", "assistant", "bard", "bing", "model"})


class DatasetError(LoadgenError, ValueError):
    """A dataset file that cannot be used; the message names the file, line or entry, field and fix."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One prompt of a dataset, with what the file says about its answer."""

    prompt: str
    output_tokens: int | None  # the reference answer's length: given, or its whitespace words
    expected: str | None  # an expected answer, for the quality axis
    line: int  # 1-based line (JSONL) or 0-based entry index (JSON array) it came from
    media: tuple[MediaRef, ...] = ()  # the row's ``images`` and ``audio`` (media_files.py)


class Dataset(list[Entry]):
    """The entries of one file, and how many conversations were skipped (too short to use)."""

    def __init__(self, entries: Sequence[Entry], path: str, fmt: str, skipped: int = 0) -> None:
        super().__init__(entries)
        self.path, self.fmt, self.skipped = path, fmt, skipped


def word_count(text: str) -> int:
    """Whitespace-separated words: the approximate token count when no tokenizer is given."""
    return len(text.split())


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _read(path: Path) -> bytes:
    if not path.is_file():
        raise DatasetError(f"{path}: no such file (give a local ShareGPT .json or prompts .jsonl file)")
    data = path.read_bytes()
    if not data.strip():
        raise DatasetError(f"{path}: the file is empty (expected ShareGPT JSON or one prompt object a line)")
    return data


def _sniff(path: Path, data: bytes) -> Literal["sharegpt", "jsonl"]:
    # The extension decides; content decides only for other names (a .txt export, a temp file).
    if path.suffix.lower() == ".json":
        return "sharegpt"
    if path.suffix.lower() == ".jsonl":
        return "jsonl"
    head = data.lstrip()[:1]
    if head == b"[":
        return "sharegpt"
    if head == b"{":
        return "jsonl"
    raise DatasetError(f"{path}: cannot tell the format; name it .json (ShareGPT) or .jsonl, or pass fmt")


def load_dataset(path: str | Path, fmt: Literal["auto", "sharegpt", "jsonl"] = "auto") -> Dataset:
    """Every usable entry of a local file, in file order (``select`` filters and shuffles)."""
    p = Path(path)
    data = _read(p)
    kind = _sniff(p, data) if fmt == "auto" else fmt
    if kind == "sharegpt":
        return _sharegpt(p, data)
    if kind == "jsonl":
        return _jsonl(p, data)
    raise DatasetError(f"dataset format {fmt!r} is not one of 'auto', 'sharegpt', 'jsonl'")


def _sharegpt(path: Path, data: bytes) -> Dataset:
    try:
        items = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise DatasetError(
            f"{path}: not valid JSON ({e}); a ShareGPT file is one JSON array "
            "(for one prompt object a line, name it .jsonl or pass fmt='jsonl')"
        ) from None
    if not isinstance(items, list):
        raise DatasetError(f"{path}: the top level is {_kind(items)}, expected an array of conversations")
    entries, skipped = [], 0
    for i, item in enumerate(items):
        turns = _turns(path, i, item)
        pair = _first_exchange(turns)
        if pair is None:
            skipped += 1
            continue
        media = read_media(f"{path} entry {i}", path.parent, item, DatasetError)
        entries.append(Entry(pair[0], word_count(pair[1]), None, i, media))
    if not entries:
        raise DatasetError(
            f"{path}: no usable conversations among {len(items)} "
            "(each needs a human turn followed by a reply)"
        )
    return Dataset(entries, str(path), "sharegpt", skipped)


def _turns(path: Path, i: int, item: Any) -> list[tuple[str, str]]:
    if not isinstance(item, dict):
        raise DatasetError(
            f"{path} entry {i}: the entry is {_kind(item)}, expected an object with conversations"
        )
    conv = item.get("conversations")
    if not isinstance(conv, list):
        got = "missing" if conv is None else _kind(conv)
        raise DatasetError(
            f'{path} entry {i}: conversations is {got}, expected a list of {{"from", "value"}}'
        )
    turns = []
    for j, turn in enumerate(conv):
        if not isinstance(turn, dict):
            raise DatasetError(
                f"{path} entry {i}: conversations[{j}] is {_kind(turn)}, "
                'expected an object {"from", "value"}'
            )
        for key in ("from", "value"):
            if not isinstance(turn.get(key), str):
                got = "missing" if key not in turn else _kind(turn[key])
                raise DatasetError(f"{path} entry {i}: conversations[{j}].{key} is {got}, expected a string")
        turns.append((turn["from"].lower(), turn["value"]))
    return turns


def _first_exchange(turns: list[tuple[str, str]]) -> tuple[str, str] | None:
    """(first human turn, the reply right after it), as vLLM's benchmark samples ShareGPT."""
    if len(turns) < 2:
        return None
    for (who, text), (next_who, reply) in zip(turns, turns[1:]):
        if who in HUMAN:
            return (text, reply) if next_who in ASSISTANT else None
    return None


def _jsonl(path: Path, data: bytes) -> Dataset:
    entries = []
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise DatasetError(
                f'{path} line {n}: not valid JSON ({e}); expected {{"prompt": "..."}}'
            ) from None
        if not isinstance(obj, dict):
            raise DatasetError(
                f'{path} line {n}: the line is {_kind(obj)}, expected an object {{"prompt": "..."}}'
            )
        entries.append(_jsonl_entry(path, n, obj))
    if not entries:
        raise DatasetError(f'{path}: no prompts (only blank lines); expected one {{"prompt": "..."}} a line')
    return Dataset(entries, str(path), "jsonl")


def _jsonl_entry(path: Path, n: int, obj: dict[str, Any]) -> Entry:
    prompt = obj.get("prompt")
    if not isinstance(prompt, str):
        got = "missing" if "prompt" not in obj else repr(prompt)
        raise DatasetError(f"{path} line {n}: prompt is {got}, expected a string")
    out = obj.get("output_tokens")
    if out is not None and (not isinstance(out, int) or isinstance(out, bool) or out < 1):
        raise DatasetError(f"{path} line {n}: output_tokens is {out!r}, expected a positive integer")
    expected = obj.get("expected")
    if expected is not None and not isinstance(expected, str):
        raise DatasetError(
            f"{path} line {n}: expected is {expected!r}, expected a string (the answer's text)"
        )
    return Entry(prompt, out, expected, n, read_media(f"{path} line {n}", path.parent, obj, DatasetError))


def _bound(value: int | None) -> str:
    return "any" if value is None else str(value)


def select(
    entries: Sequence[Entry],
    *,
    seed: int,
    count_tokens: Callable[[str], int] = word_count,
    min_input_tokens: int = 1,
    max_input_tokens: int | None = None,
    min_output_tokens: int = 1,
    max_output_tokens: int | None = None,
) -> list[Entry]:
    """The entries whose lengths fall within the bounds (inclusive), in a seeded random order.

    Entries without an ``output_tokens`` pass the output bounds: the server decides their length.
    The order is a permutation drawn from ``default_rng([seed, 7])``, so a seed names one order.
    """
    hi_in = max_input_tokens if max_input_tokens is not None else float("inf")
    hi_out = max_output_tokens if max_output_tokens is not None else float("inf")
    kept = [
        e
        for e in entries
        if min_input_tokens <= count_tokens(e.prompt) <= hi_in
        and (e.output_tokens is None or min_output_tokens <= e.output_tokens <= hi_out)
    ]
    if not kept:
        raise DatasetError(
            f"no entries among {len(entries)} have {min_input_tokens} <= input tokens <= "
            f"{_bound(max_input_tokens)} and {min_output_tokens} <= output tokens <= "
            f"{_bound(max_output_tokens)}; widen the length bounds"
        )
    order = np.random.default_rng([seed, 7]).permutation(len(kept))
    return [kept[i] for i in order]
