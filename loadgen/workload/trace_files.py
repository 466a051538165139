"""Reading a trace file's rows: which layout it is (Mooncake JSONL, the Azure LLM inference CSV,
loadgen's native JSONL), and each layout's times, lengths and hash blocks, row by row, checked
(in time order, whole numbers, one error naming the file, line, field and fix). ``traces.py``
cuts the window out of the rows and makes them a ``Trace``."""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import re
from pathlib import Path
from typing import Any

import orjson

from loadgen.errors import LoadgenError

BLOCK_TOKENS = 512  # tokens per Mooncake hash block; the last block of a prompt may be partial
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# (time, input length, output length) field names; the time is in milliseconds from trace start.
JSONL_FIELDS = {
    "mooncake": ("timestamp", "input_length", "output_length"),
    "native": ("timestamp_ms", "input_tokens", "output_tokens"),
}
# 2023 traces write "2023-11-16 18:15:46.6805900" (100 ns ticks), 2024 ones "... 00:00:00.001163+00:00".
_STAMP = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?\s*(?:(Z)|([+-])(\d\d):?(\d\d))?"
)
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()


class TraceError(LoadgenError, ValueError):
    """A trace file or replay setting that cannot be used; names the file, line, field and fix."""


def sniff(path: Path, text: str) -> str:
    # .csv is Azure; JSON lines tell Mooncake from native by their time field.
    if path.suffix.lower() == ".csv":
        return "azure"
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("TIMESTAMP"):
            return "azure"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "timestamp_ms" in obj:
            return "native"
        if isinstance(obj, dict) and "timestamp" in obj:
            return "mooncake"
        raise TraceError(
            f"{path} line {n}: cannot tell the layout; expected a Mooncake object with timestamp, a native "
            f"object with timestamp_ms, or the Azure CSV header {','.join(AZURE_HEADER)}"
        )
    raise AssertionError("unreachable: the text is not blank")


# (times in ns, input lengths, output lengths, hash_ids per row or None), one entry per row.
Rows = tuple[list[int], list[int], list[int], list[tuple[int, ...]] | None]


def read_jsonl(path: Path, text: str, kind: str) -> Rows:
    t_key, in_key, out_key = JSONL_FIELDS[kind]
    times: list[int] = []
    inp: list[int] = []
    out: list[int] = []
    hashes: list[tuple[int, ...]] = []
    lines: list[int] = []  # the line of each row, for the order check and the hash_ids rule
    # Split on newlines only, as editors count lines (str.splitlines also splits on U+2028 ...).
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise TraceError(f"{path} line {n}: not valid JSON ({e}); expected one object a line") from None
        if not isinstance(obj, dict):
            raise TraceError(f'{path} line {n}: the line is not an object, expected {{"{t_key}": ...}}')
        ms = obj.get(t_key)
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not (math.isfinite(ms) and ms >= 0):
            got = "missing" if t_key not in obj else repr(ms)
            raise TraceError(
                f"{path} line {n}: {t_key} is {got}, expected milliseconds >= 0 from trace start"
            )
        t = ms * 1_000_000 if isinstance(ms, int) else round(ms * 1e6)
        _in_order(path, n, t, times, lines, t_key)
        inp.append(_length(path, n, obj, in_key))
        out.append(_length(path, n, obj, out_key))
        times.append(t)
        lines.append(n)
        has = "hash_ids" in obj
        if len(times) > 1 and has != bool(hashes):  # the first row decides for the file
            raise TraceError(
                f"{path} line {n}: hash_ids is {'given' if has else 'missing'}, but line {lines[0]} "
                f"{'has none' if has else 'has them'}; give hash_ids on every line or on none"
            )
        if has:
            hashes.append(_hash_ids(path, n, obj["hash_ids"], inp[-1], in_key))
    if not times:
        raise TraceError(f"{path}: no requests (only blank lines)")
    return times, inp, out, (hashes or None)


def _in_order(path: Path, n: int, t: int, times: list[int], lines: list[int], field: str) -> None:
    if times and t < times[-1]:
        raise TraceError(
            f"{path} line {n}: {field} goes back in time (earlier than line {lines[-1]}); "
            "a trace must be in time order: sort it by time first"
        )


def _length(path: Path, n: int, obj: dict[str, Any], key: str) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        got = "missing" if key not in obj else repr(v)
        raise TraceError(f"{path} line {n}: {key} is {got}, expected a whole number of tokens >= 0")
    return v


def _hash_ids(path: Path, n: int, ids: Any, length: int, in_key: str) -> tuple[int, ...]:
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in ids):
        raise TraceError(f"{path} line {n}: hash_ids is {ids!r:.60}, expected a list of integers")
    want = -(-length // BLOCK_TOKENS)
    if len(ids) != want:
        raise TraceError(
            f"{path} line {n}: hash_ids has {len(ids)} ids, expected ceil({in_key} / {BLOCK_TOKENS}) = "
            f"{want} for {in_key} {length} (one id per {BLOCK_TOKENS}-token block, the last one partial)"
        )
    return tuple(ids)


def read_azure(path: Path, text: str) -> Rows:
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    if tuple(h.strip() for h in header) != AZURE_HEADER:
        raise TraceError(
            f"{path} line 1: header is {','.join(header)!r}, expected {','.join(AZURE_HEADER)} "
            "(the Azure LLM inference trace layout)"
        )
    times: list[int] = []
    inp: list[int] = []
    out: list[int] = []
    lines: list[int] = []
    for row in reader:
        n = reader.line_num
        if not row or not "".join(row).strip():
            continue
        if len(row) != 3:
            raise TraceError(
                f"{path} line {n}: the row has {len(row)} fields, expected 3 ({','.join(AZURE_HEADER)})"
            )
        t = _stamp_ns(row[0])
        if t is None:
            raise TraceError(
                f"{path} line {n}: TIMESTAMP is {row[0]!r}, "
                "expected a date and time like 2023-11-16 18:15:46.6805900"
            )
        _in_order(path, n, t, times, lines, "TIMESTAMP")
        for key, value, dest in (("ContextTokens", row[1], inp), ("GeneratedTokens", row[2], out)):
            v = value.strip()
            if not (v.isascii() and v.isdigit()):
                raise TraceError(
                    f"{path} line {n}: {key} is {value!r}, expected a whole number of tokens >= 0"
                )
            dest.append(int(v))
        times.append(t)
        lines.append(n)
    if not times:
        raise TraceError(f"{path}: no requests after the header")
    return times, inp, out, None


def _stamp_ns(text: str) -> int | None:
    """Nanoseconds since 1970 (UTC unless an offset is given), exact: no float in the way."""
    m = _STAMP.fullmatch(text.strip())
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    try:
        day = dt.date(y, mo, d).toordinal() - _EPOCH_DAY
        dt.time(h, mi, s)
    except ValueError:
        return None
    secs = day * 86400 + h * 3600 + mi * 60 + s
    if m[9]:
        sign = -1 if m[9] == "-" else 1
        secs -= sign * (int(m[10]) * 3600 + int(m[11]) * 60)
    return secs * 1_000_000_000 + int((m[7] or "0").ljust(9, "0"))
