"""A saved run's files: ``reports/<run-id>/summary.json`` and its records (``records.parquet`` or
``requests.jsonl``, ``analysis.record_store``), written and read.

The layout and field names are a documented interface (docs/design.md, "Result files"); anything
renamed bumps ``SCHEMA_VERSION`` and ``load_summary`` refuses versions it does not know. It
lives in ``analysis`` because the analyses that compare and gate saved runs read them through it;
``loadgen.result`` (the run's result object, above analysis) re-exports it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from loadgen.analysis import record_store
from loadgen.analysis.record_store import LOG, STORE
from loadgen.analysis.table import RecordTable
from loadgen.errors import ResultError
from loadgen.records import ReadReport, RequestRecord, read_records
from loadgen.summary import SCHEMA_VERSION, Summary
from loadgen.summary.schema import validate

__all__ = [
    "GROUND_TRUTH",
    "REQUESTS",
    "SCHEMA_VERSION",
    "STORE",
    "SUMMARY",
    "load_records",
    "load_summary",
    "load_table",
    "write_json_atomic",
    "write_summary",
]
SUMMARY = "summary.json"
REQUESTS = LOG  # requests.jsonl
GROUND_TRUTH = "ground_truth.jsonl"


def write_json_atomic(path: Path, data: Any) -> Path:
    """``data`` as indented JSON at ``path``, through a temporary file renamed over it: a
    reader (or a run resumed after ``kill -9``) sees the old file or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    tmp.replace(path)
    return path


def write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    """``rows`` as JSON lines at ``path`` (a finished series: the server's scrapes, telemetry)."""
    with open(path, "wb") as f:
        for row in rows:
            f.write(orjson.dumps(row) + b"\n")


def write_summary(run_dir: Path, summary: Summary) -> Path:
    return write_json_atomic(Path(run_dir) / SUMMARY, summary)


def _run_dir(path: str | Path) -> Path:
    p = Path(path)
    if p.is_file():
        p = p.parent
    if not any((p / name).exists() for name in (REQUESTS, STORE, SUMMARY)):
        raise ResultError(f"{p}: not a loadgen run directory (no {SUMMARY}, {STORE} or {REQUESTS})")
    return p


def load_summary(path: str | Path) -> Summary:
    """A saved run's summary, checked against the types of ``loadgen.summary`` (a file of an
    earlier loadgen with the same ``schema_version`` loads; a damaged one is a ``ResultError``
    naming where)."""
    p = _run_dir(path) / SUMMARY
    if not p.exists():
        raise ResultError(
            f"{p} is missing: the run was killed before it finished; "
            f"its records are in {REQUESTS} (loadgen.load_run reads them)"
        )
    summary = orjson.loads(p.read_bytes())
    version = summary.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultError(
            f"{p}: schema_version {version!r} is not supported by this loadgen "
            f"(it reads version {SCHEMA_VERSION}); use the loadgen version that wrote it"
        )
    return validate(summary, str(p))


class SkippedLinesWarning(UserWarning):
    """A saved run's requests.jsonl had lines that do not parse (a killed run's torn last line)."""


def _records_file(path: str | Path) -> Path:
    """The folder's record store, else its requests.jsonl (``record_store.read_run_table``)."""
    d = _run_dir(path)
    for name in (STORE, REQUESTS):
        if (d / name).exists():
            return d / name
    raise ResultError(f"{d / REQUESTS} is missing (and so is {d / STORE})")


def _warn_skipped(p: Path, report: ReadReport) -> None:
    if report.skipped_lines:
        warnings.warn(
            f"{p}: {report.skipped_lines} line(s) do not parse and were skipped (first: line "
            f"{report.first_skipped}); a run killed mid-write leaves one torn last line",
            SkippedLinesWarning,
            stacklevel=3,
        )


def load_records(path: str | Path, report: ReadReport | None = None) -> list[RequestRecord]:
    """Every record of a saved run. Unparseable lines are skipped, counted in ``report`` and
    announced with a ``SkippedLinesWarning`` naming how many, never silently. A long run's
    records take gigabytes as Python objects: ``load_table`` reads the same in a few bytes a
    chunk, and is what every analysis reads."""
    p = _records_file(path)
    report = report if report is not None else ReadReport()
    if p.name == STORE:
        return list(record_store.iter_records(p))
    records = list(read_records(p, report))
    _warn_skipped(p, report)
    return records


def load_table(path: str | Path, report: ReadReport | None = None) -> RecordTable:
    """The records of a saved run as a ``RecordTable``, read a block at a time (never all of
    them as Python objects). Skipped lines are counted and warned about as by ``load_records``."""
    p = _records_file(path)
    report = report if report is not None else ReadReport()
    table = record_store.read_run_table(p.parent, report)
    _warn_skipped(p, report)
    return table
