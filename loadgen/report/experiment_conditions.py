"""The experiment report's "Conditions that differ": one readable value per configuration.

``condition_diff`` lists every field whose raw value is not the same in every run; a person
reading eight columns needs what differs in words. So each value is shown as ``readable`` says:
a distribution as mean / p50 / p99, a list of sources as their count and kinds, a list of models
as their ids, a mapping as ``key=value`` pairs, never a Python repr. And one rule decides which
fields are left out: those whose readable values are the same in every configuration once what
differs between any two runs is taken out (``VOLATILE_KEYS``: timestamps, process and run ids;
and a port, when loadgen picked it). The simulator's calibration block folds into its status and
row count; ``calibration_table`` lists the rows.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.analysis.condition_diff import condition_diff
from loadgen.report.blocks import Table

__all__ = [
    "CALIBRATION",
    "VOLATILE_KEYS",
    "calibration_table",
    "differing_rows",
    "readable",
]

# Keys whose values differ between any two runs of the same thing: when they were made, the
# process and the run. Matched (fnmatch) against a mapping's keys and a field's last segment.
VOLATILE_KEYS: tuple[str, ...] = ("created", "*_at", "timestamp", "time", "*_ns", "pid", "run_id", "uuid")
# With ports loadgen picked (every configuration a `sim:` or `serve:` one), the port too.
PORT_KEYS: tuple[str, ...] = ("port", "*_port")
CALIBRATION = "target.builtin_simulator.calibration"
DISTRIBUTION = ("mean", "p50", "p99")
MAX_TEXT = 120

_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?")
_URL_PORT = re.compile(r"(//[^/\s:@]+):\d+")


def _volatile(key: str, ports_assigned: bool) -> bool:
    keys = VOLATILE_KEYS + PORT_KEYS if ports_assigned else VOLATILE_KEYS
    return any(fnmatch.fnmatchcase(key, k) for k in keys)


def number(v: float) -> str:
    """A figure for a reader: whole numbers as they are (thousands separated), else four
    significant figures, one decimal at 100 and above: 237, 22,714, 260.3, 32.17, 0.7754."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.4g}"


def readable(value: Any, field: str = "", ports_assigned: bool = False) -> str:
    """``value`` as one short line (see the module's docstring); ``field`` names the noun of a
    list of sources ("telemetry.sources": "2 sources: simulator, dcgm")."""
    if value is None:
        return "-"
    if isinstance(value, (bool, int, float)):
        return number(value)
    if isinstance(value, str):
        text = _ISO_TIME.sub("<time>", value)
        if ports_assigned:
            text = _URL_PORT.sub(r"\1:<port>", text)
        return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"
    if isinstance(value, Mapping):
        if all(k in value for k in DISTRIBUTION):
            return " / ".join(readable(value[k]) for k in DISTRIBUTION)
        kept = {k: v for k, v in value.items() if v is not None and not _volatile(str(k), ports_assigned)}
        return ", ".join(f"{k}={readable(v, str(k), ports_assigned)}" for k, v in kept.items()) or "-"
    if isinstance(value, Sequence):
        items = list(value)
        if items and all(isinstance(x, Mapping) and "kind" in x for x in items):
            noun = field.rsplit(".", 1)[-1].removesuffix("s") or "item"
            kinds = ", ".join(str(x["kind"]) for x in items)
            return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}: {kinds}"
        if items and all(isinstance(x, Mapping) and "id" in x for x in items):
            return ", ".join(str(x["id"]) for x in items)
        sep = "; " if any(isinstance(x, Mapping) for x in items) else ", "
        return sep.join(readable(x, field, ports_assigned) for x in items) or "none"
    return str(value)


def _calibration(conditions: Mapping[str, Any]) -> Mapping[str, Any] | None:
    node: Any = conditions
    for key in CALIBRATION.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def _calibration_cell(cal: Mapping[str, Any] | None) -> tuple[Any, str]:
    """What compares (status and row ids) and what shows (status and the rows' count)."""
    if cal is None:
        return None, "-"
    ids = tuple(r.get("id") for r in cal.get("rows") or [])
    return (cal.get("status"), ids), f"{cal.get('status')}: {len(ids)} row{'' if len(ids) == 1 else 's'}"


def differing_rows(conditions: Sequence[Mapping[str, Any]], *, ports_assigned: bool) -> list[tuple[str, ...]]:
    """The table's rows, (field, one readable value per run), for the fields whose readable
    values differ; the calibration block as one row of its status and row count. Fields with the
    same values in every run (a matrix value as label, profile setting and the simulator's
    config) share one row, their names joined, so each difference is read once."""
    out: list[tuple[str, ...]] = []
    calibration_done = False
    for d in condition_diff(conditions):
        if d.field == CALIBRATION or d.field.startswith(CALIBRATION + "."):
            if not calibration_done:
                calibration_done = True
                cells = [_calibration_cell(_calibration(c)) for c in conditions]
                if len({key for key, _ in cells}) > 1:
                    out.append((f"{CALIBRATION} (rows: see Simulator calibration)", *(t for _, t in cells)))
            continue
        if _volatile(d.field.rsplit(".", 1)[-1], ports_assigned):
            continue
        shown = [readable(v, d.field, ports_assigned) for v in d.values]
        if len(set(shown)) > 1:
            out.append((d.field, *shown))
    merged: dict[tuple[str, ...], list[str]] = {}
    for field, *values in out:
        merged.setdefault(tuple(values), []).append(field)
    return [(", ".join(fields), *values) for values, fields in merged.items()]


def calibration_table(labels: Sequence[str], conditions: Sequence[Mapping[str, Any]]) -> Table | None:
    """Each configuration's calibration in full: its status and every row of the calibration
    table that vouches for it, with the row's error; None when no run was on the simulator."""
    rows = []
    for label, c in zip(labels, conditions):
        cal = _calibration(c)
        if cal is None:
            continue
        listed = ", ".join(f"{r['id']} {r['error_pct']:+.1f} %" for r in cal.get("rows") or []) or "none"
        rows.append((label, str(cal.get("status")), listed))
    if not rows:
        return None
    return Table(("configuration", "status", "rows of the calibration table (error)"), tuple(rows))
