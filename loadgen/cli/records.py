"""``loadgen records RUN_DIR``: what a run's records take on disk, and the two conversions
between its files: ``--compact`` (requests.jsonl into the record store, as a columnar run does
when its load ends: for a run killed before that, or one written as jsonl) and ``--jsonl``
(requests.jsonl back from the store, for tools that read JSON lines)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from loadgen.analysis.record_store import LOG, STORE, compact, export_jsonl, read_run_table
from loadgen.errors import ResultError
from loadgen.records import ReadReport


def add_parser(sub: Any) -> None:
    r = sub.add_parser(
        "records",
        help="a run's records on disk: bytes per token; compact them, or export requests.jsonl",
        description=f"Say which record files a run folder holds and what they take per streamed token. "
        f"--compact writes {STORE} (Parquet row groups, chunk times to the microsecond) from "
        f"{LOG} and removes the log, as a run with output.records=columnar does when its load ends; "
        f"--jsonl writes {LOG} from {STORE}. Every command that reads a run reads either file.",
    )
    r.add_argument("run_dir", help="a run directory, e.g. reports/<run-id>")
    how = r.add_mutually_exclusive_group()
    how.add_argument("--compact", action="store_true", help=f"write {STORE} from {LOG}, then remove the log")
    how.add_argument("--jsonl", action="store_true", help=f"write {LOG} from {STORE} (the store stays)")
    r.add_argument("--keep-log", action="store_true", help=f"with --compact: keep {LOG} as well")


def cmd_records(a: argparse.Namespace) -> int:
    run = Path(a.run_dir)
    log, store = run / LOG, run / STORE
    if a.compact:
        if not log.exists():
            raise ResultError(
                f"{log} is missing: nothing to compact" + (f" ({store} exists)" if store.exists() else "")
            )
        report = ReadReport()
        rows = _write(lambda: compact(log, store, report))
        if not a.keep_log:
            log.unlink()
        skipped = (
            f"; {report.skipped_lines} line(s) that do not parse skipped" if report.skipped_lines else ""
        )
        print(f"wrote {store}: {rows} records{skipped}")
    elif a.jsonl:
        if not store.exists():
            raise ResultError(f"{store} is missing: the run's records are in {log} already")
        rows = _write(lambda: export_jsonl(store, log))
        print(f"wrote {log}: {rows} records")
    _describe(run)
    return 0


def _write(step: Any) -> int:
    try:
        return int(step())
    except OSError as exc:
        raise ResultError(f"cannot write the records: {exc.strerror or exc}") from None


def _describe(run: Path) -> None:
    files = [run / n for n in (STORE, LOG) if (run / n).exists()]
    if not files:
        raise ResultError(f"{run}: no {STORE} and no {LOG}: not a run folder with records")
    table = read_run_table(run, ReadReport())
    tokens = max(table.chunks.total, 1)
    for f in files:
        size = f.stat().st_size
        print(
            f"{f.name}: {size:,} bytes, {len(table):,} records, {size / tokens:.2f} bytes per streamed chunk"
        )
