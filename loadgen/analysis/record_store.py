"""The columnar record store: a run's records as Parquet row groups, about 2 bytes a token.

requests.jsonl costs 18.6 bytes a streamed token (every chunk time 19 digits of JSON); an hour
of a fleet is tens of gigabytes. ``records.parquet`` keeps the same records in row groups of
``ROWS_PER_GROUP``, the chunk times as per-row gaps to the microsecond (``store_arrow``), zstd:
about 1.9 bytes a token for 15-30 ms inter-token gaps. Nanoseconds would cost 3.5: a gap drawn
over 15 ms has log2(15e6) = 23.8 bits of entropy, 2.98 bytes before any framing, so the 3-byte
budget cannot hold them. Every scalar field, text field and the last chunk's time stay exact.

How a run gets there (docs/design.md, "Record store"): the run appends requests.jsonl as ever,
one ``write(2)`` per finished record (the durability a ``kill -9`` needs, and the bytes the
workers already send, so not a cycle more per token during the load), and compacts it into the
store once the load is over (``compact``), removing the log. A killed run keeps its log;
``read_run_table`` reads whichever a folder holds, and ``compact`` turns a killed run's log
into a store later (``loadgen records RUN --compact``). ``export_jsonl`` writes requests.jsonl
back from a store.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.analysis.table import RecordTable
from loadgen.analysis.table_build import Builder, parsed_blocks
from loadgen.records import TEXT_FIELDS, ReadReport, RequestRecord

if TYPE_CHECKING:  # pyarrow is imported when a store is read or written, not by every reader of a run
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

__all__ = ["LOG", "STORE", "UNIT_NS", "compact", "concat_stores", "export_jsonl", "iter_records"]
__all__ += ["read_run_table", "read_store", "store_rows"]

STORE = "records.parquet"
LOG = "requests.jsonl"  # the run's append-only log, and the export format
UNIT_NS = 1000  # chunk times to the microsecond: the module's docstring says why
ROWS_PER_GROUP = 8192  # about 2 M chunks of 256-token streams a row group
_UNIT_KEY = b"loadgen.chunk_unit_ns"


def compact(log: Path, store: Path, report: ReadReport | None = None, unit_ns: int = UNIT_NS) -> int:
    """Write the records of the requests.jsonl ``log`` to ``store`` (through a temporary file
    renamed over it, synced first: a crash leaves the log or the store, never neither), the
    lines that do not parse skipped and counted in ``report``; returns the rows written."""
    from loadgen.analysis.store_arrow import to_arrow

    tmp = store.with_name(store.name + ".tmp")
    rows = 0
    writer: pq.ParquetWriter | None = None
    try:
        for t in _groups(log, report, unit_ns):
            writer = writer or _writer(tmp, t.schema, unit_ns)
            writer.write_table(t, row_group_size=ROWS_PER_GROUP)
            rows += t.num_rows
        if writer is None:  # no record: an empty store, still with every column
            empty = to_arrow(RecordTable.from_records(()), {}, unit_ns)
            writer = _writer(tmp, empty.schema, unit_ns)
            writer.write_table(empty)
        writer.close()
        writer = None
        _sync(tmp)
        tmp.replace(store)
        _sync(store.parent)
    finally:
        if writer is not None:
            writer.close()
        if tmp.exists():
            tmp.unlink()
    return rows


def read_store(store: Path, rows: tuple[int, int] | None = None) -> RecordTable:
    """A store's records as a ``RecordTable`` (without the text fields), or rows ``[a, b)``.
    Read a row group at a time, on this thread: what a pass allocates stays one row group's
    (fresh memory for a whole run's temporaries cost more in page faults than the decoding)."""
    import pyarrow.parquet as pq

    from loadgen.analysis.store_arrow import STRINGS, from_arrow

    f = pq.ParquetFile(store, read_dictionary=list(STRINGS))
    columns = [n for n in f.schema_arrow.names if n not in TEXT_FIELDS]
    unit, meta = _unit(f), f.metadata
    a, b = rows if rows is not None else (0, meta.num_rows)
    parts, start = [], 0
    for g in range(f.num_row_groups):
        n = meta.row_group(g).num_rows
        lo, hi = max(a - start, 0), min(b - start, n)
        if lo < hi:
            t = f.read_row_group(g, columns=columns, use_threads=False)
            parts.append(from_arrow(t.slice(lo, hi - lo), unit))
        start += n
    if not parts:
        return from_arrow(f.schema_arrow.empty_table().select(columns), unit)
    return parts[0] if len(parts) == 1 else RecordTable.concat(parts)


def read_run_table(run_dir: Path, report: ReadReport | None = None) -> RecordTable:
    """The one way into a run folder's records: its store when it has one, else its
    requests.jsonl (a run written as jsonl, or killed before it compacted), lines that do not
    parse counted in ``report``."""
    store = Path(run_dir) / STORE
    if store.exists():
        return read_store(store)
    return RecordTable.from_file(Path(run_dir) / LOG, report)


def store_rows(store: Path, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The values of ``columns`` row by row, a row group at a time (text fields decoded)."""
    import pyarrow.parquet as pq

    from loadgen.analysis.store_arrow import text_values

    f = pq.ParquetFile(store)
    for g in range(f.num_row_groups):
        t = f.read_row_group(g, columns=list(columns), use_threads=False)
        values = {
            name: text_values(t, name) if name in TEXT_FIELDS else t.column(name).to_pylist()
            for name in columns
        }
        for i in range(t.num_rows):
            yield {name: v[i] for name, v in values.items()}


def iter_records(store: Path) -> Iterator[RequestRecord]:
    """Every record of a store, text fields included, a row group at a time."""
    import pyarrow.parquet as pq

    from loadgen.analysis.store_arrow import STRINGS, from_arrow, text_values

    f = pq.ParquetFile(store, read_dictionary=list(STRINGS))
    unit = _unit(f)
    text = [n for n in TEXT_FIELDS if n in f.schema_arrow.names]
    for g in range(f.num_row_groups):
        t = f.read_row_group(g, use_threads=False)
        values = {name: text_values(t, name) for name in text}
        for i, rec in enumerate(from_arrow(t.drop_columns(text), unit).iter_records()):
            for name, v in values.items():
                setattr(rec, name, v[i])
            yield rec


def export_jsonl(store: Path, out: Path) -> int:
    """requests.jsonl of a store's records (``out``, replaced); returns how many."""
    n = 0
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh:
        for rec in iter_records(store):
            fh.write(rec.to_json() + b"\n")
            n += 1
    tmp.replace(out)
    return n


def concat_stores(stores: Sequence[Path], out: Path) -> None:
    """One store of the rows of ``stores``, one after another (a repeated run's parent)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from loadgen.analysis.store_arrow import to_arrow

    tables = [pq.read_table(s) for s in stores]
    unit = _unit(pq.ParquetFile(stores[0])) if stores else UNIT_NS
    t = pa.concat_tables(tables, promote_options="permissive") if tables else None
    tmp = out.with_name(out.name + ".tmp")
    if t is None:
        t = to_arrow(RecordTable.from_records(()), {}, unit)
    with _writer(tmp, t.schema, unit) as w:
        w.write_table(t, row_group_size=ROWS_PER_GROUP)
    tmp.replace(out)


def _groups(log: Path, report: ReadReport | None, unit_ns: int) -> Iterator[pa.Table]:
    """The log's records as Arrow tables of about ``ROWS_PER_GROUP`` rows, never the whole run
    parsed at once."""
    from loadgen.analysis.store_arrow import to_arrow

    build, text, n = Builder(), _no_text(), 0
    for rows, lines in parsed_blocks(log, 0, None, report):
        seen = ReadReport()
        build.add_checked(rows, lines, seen)
        good = _typed(rows, lines) if seen.skipped_lines else rows
        _count(report, seen)
        for name in TEXT_FIELDS:
            text[name].extend(d.get(name) for d in good)
        n += len(good)
        if n >= ROWS_PER_GROUP:
            yield to_arrow(RecordTable(*build.finish()), text, unit_ns)
            build, text, n = Builder(), _no_text(), 0
    if n:
        yield to_arrow(RecordTable(*build.finish()), text, unit_ns)


def _no_text() -> dict[str, list[Any]]:
    return {name: [] for name in TEXT_FIELDS}


def _typed(rows: list[dict[str, Any]], lines: list[int]) -> list[dict[str, Any]]:
    """The rows ``Builder.add_checked`` kept (a value not of its field's type drops a row):
    found one by one, only in a block that had such a row."""
    good = []
    for row, line in zip(rows, lines):
        one = ReadReport()
        Builder().add_checked([row], [line], one)
        if not one.skipped_lines:
            good.append(row)
    return good


def _count(report: ReadReport | None, seen: ReadReport) -> None:
    if report is not None and seen.skipped_lines:
        report.skipped_lines += seen.skipped_lines
        report.first_skipped = report.first_skipped or seen.first_skipped


def _writer(path: Path, schema: pa.Schema, unit_ns: int) -> pq.ParquetWriter:
    import pyarrow.parquet as pq

    schema = schema.with_metadata({_UNIT_KEY: str(unit_ns).encode()})
    return pq.ParquetWriter(path, schema, compression="zstd")


def _unit(f: pq.ParquetFile) -> int:
    meta = f.schema_arrow.metadata or {}
    return int(meta.get(_UNIT_KEY, b"1"))


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
