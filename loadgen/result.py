"""A run's result (``RunResult``) and ``load_run``; the files themselves are written and read by
``analysis/runs.py`` (re-exported here, the names users import).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.analysis.runs import (
    GROUND_TRUTH,
    REQUESTS,
    SCHEMA_VERSION,
    STORE,
    SUMMARY,
    SkippedLinesWarning,
    load_records,
    load_summary,
    load_table,
    write_summary,
)
from loadgen.analysis.table import RecordTable
from loadgen.errors import ResultError
from loadgen.records import ReadReport, RequestRecord
from loadgen.summary import Summary

if TYPE_CHECKING:  # pandas is imported where a frame is built, not by every reader of a run
    import pandas as pd

__all__ = [
    "GROUND_TRUTH",
    "REQUESTS",
    "SCHEMA_VERSION",
    "STORE",
    "SUMMARY",
    "ResultError",
    "RunResult",
    "SkippedLinesWarning",
    "load_records",
    "load_run",
    "load_summary",
    "load_table",
    "write_summary",
]


class RunResult:
    """A finished run: its folder and its typed summary (``loadgen.summary.Summary``). Its
    records are not held by the run (a long run's do not fit in memory as Python objects):
    ``table`` reads them from the folder's requests.jsonl as a ``RecordTable`` (a few bytes a
    chunk) when first asked for, and ``records`` rebuilds them from it; both are kept once read."""

    __slots__ = ("_records", "_table", "run_dir", "summary")

    def __init__(self, run_dir: str | Path, summary: Summary) -> None:
        self.run_dir = Path(run_dir)
        self.summary = summary
        self._records: list[RequestRecord] | None = None
        self._table: RecordTable | None = None

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        """A saved run, its summary checked against the types (``load_summary``)."""
        run_dir = Path(path)
        run_dir = run_dir.parent if run_dir.is_file() else run_dir
        return cls(run_dir, load_summary(run_dir))

    def __repr__(self) -> str:
        return f"RunResult(run_dir={str(self.run_dir)!r}, run_id={self.summary['run_id']!r})"

    @property
    def run_id(self) -> str:
        return self.summary["run_id"]

    @property
    def table(self) -> RecordTable:
        if self._table is None:
            self._table = load_table(self.run_dir)
        return self._table

    @property
    def records(self) -> list[RequestRecord]:
        if self._records is None:
            self._records = self.table.to_records()
        return self._records

    def frame(self) -> pd.DataFrame:
        """``metrics.request_frame`` of the run's records: one row per request."""
        from loadgen.analysis.metrics import request_frame

        return request_frame(self.table)


def load_run(path: str | Path) -> pd.DataFrame:
    """The per-request records of a saved run as a pandas DataFrame, one row per request,
    with the raw record fields and the derived ttft_ms, ttfb_ms, tpot_ms, e2e_ms, client_lag_ms.
    ``frame.attrs["skipped_lines"]`` counts lines of requests.jsonl that did not parse."""
    from loadgen.analysis.metrics import request_frame

    report = ReadReport()
    frame = request_frame(load_table(path, report))
    frame.attrs["skipped_lines"] = report.skipped_lines
    return frame
