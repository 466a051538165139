"""Result files: ``reports/<run-id>/summary.json`` and ``requests.jsonl``, saved and loaded.

The layout and field names are a documented interface (docs/design.md, "Result files"); anything
renamed bumps ``SCHEMA_VERSION`` and ``load_summary`` refuses versions it does not know.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadgen.errors import ResultError
from loadgen.records import ReadReport, RequestRecord, read_records

SCHEMA_VERSION = 1
SUMMARY = "summary.json"
REQUESTS = "requests.jsonl"
GROUND_TRUTH = "ground_truth.jsonl"


@dataclass(slots=True)
class RunResult:
    run_dir: Path
    summary: dict
    records: list[RequestRecord]

    @property
    def run_id(self) -> str:
        return self.summary["run_id"]

    def frame(self) -> Any:
        from loadgen.analysis.metrics import request_frame

        return request_frame(self.records)


def write_summary(run_dir: Path, summary: dict) -> Path:
    path = Path(run_dir) / SUMMARY
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    tmp.replace(path)  # a reader never sees half a summary
    return path


def _run_dir(path: str | Path) -> Path:
    p = Path(path)
    if p.is_file():
        p = p.parent
    if not (p / REQUESTS).exists() and not (p / SUMMARY).exists():
        raise ResultError(f"{p}: not a loadgen run directory (no {SUMMARY} or {REQUESTS})")
    return p


def load_summary(path: str | Path) -> dict:
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
    return summary


class SkippedLinesWarning(UserWarning):
    """A saved run's requests.jsonl had lines that do not parse (a killed run's torn last line)."""


def load_records(path: str | Path, report: ReadReport | None = None) -> list[RequestRecord]:
    """Every record of a saved run. Unparseable lines are skipped, counted in ``report`` and
    announced with a ``SkippedLinesWarning`` naming how many, never silently."""
    p = _run_dir(path) / REQUESTS
    if not p.exists():
        raise ResultError(f"{p} is missing")
    report = report if report is not None else ReadReport()
    records = list(read_records(p, report))
    if report.skipped_lines:
        warnings.warn(
            f"{p}: {report.skipped_lines} line(s) do not parse and were skipped (first: line "
            f"{report.first_skipped}); a run killed mid-write leaves one torn last line",
            SkippedLinesWarning,
            stacklevel=2,
        )
    return records


def load_run(path: str | Path) -> Any:
    """The per-request records of a saved run as a pandas DataFrame, one row per request,
    with the raw record fields and the derived ttft_ms, ttfb_ms, tpot_ms, e2e_ms, client_lag_ms.
    ``frame.attrs["skipped_lines"]`` counts lines of requests.jsonl that did not parse."""
    from loadgen.analysis.metrics import request_frame

    report = ReadReport()
    frame = request_frame(load_records(path, report))
    frame.attrs["skipped_lines"] = report.skipped_lines
    return frame
