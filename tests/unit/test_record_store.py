"""The columnar record store (``loadgen.analysis.record_store``): what goes in comes out, each
field exactly but the chunk times, which come back within half a microsecond; a log's torn or
damaged lines are skipped and counted; the metrics of a store are the log's."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from loadgen.analysis import metrics
from loadgen.analysis.record_store import (
    ROWS_PER_GROUP,
    compact,
    export_jsonl,
    iter_records,
    read_run_table,
    read_store,
)
from loadgen.analysis.table import RecordTable
from loadgen.records import ReadReport, RequestRecord, read_records, write_records

from helpers import MS, failed_record, ok_record

LISTS = ("chunk_times_ns", "chunk_tokens", "reasoning_times_ns", "reasoning_tokens")


def every_field_set(i: int) -> RequestRecord:
    """A record with every field off its default, chosen by the field's declared type alone:
    a field added to ``RequestRecord`` later is covered with no edit here."""
    values: dict[str, Any] = {}
    for n, f in enumerate(dataclasses.fields(RequestRecord)):
        kind = str(f.type).replace(" ", "")
        values[f.name] = {
            "int": 1_000 * i + n,
            "int|None": 7_000_000_000_123 + 1_000 * i + n,
            "bool": f.default is not True,
            "bool|None": i % 2 == 0,
            "float|None": 0.25 + i,
            "str": f"s{n}",
            "str|None": f"value {n} of {i}",
            "list[str]|None": ["The", " cat", "", "é ✓"],
            "list[dict[str,str]]|None": [{"name": "f", "arguments": '{"a": 1}'}],
        }.get(kind)
    send = 5_000_000_000_000 + i * 997
    values.update(
        t_send_ns=send,
        t_first_token_ns=send + 123_456_789,
        chunk_times_ns=[send + 123_456_789, send + 140_000_001, send + 171_234_567],
        chunk_tokens=[1, 3, 300],
        reasoning_times_ns=[send + 123_456_789],
        reasoning_tokens=[2],
    )
    return RequestRecord(**values)


def as_dict(r: RequestRecord) -> dict[str, Any]:
    return {f.name: getattr(r, f.name) for f in dataclasses.fields(RequestRecord)}


def store_of(tmp_path: Path, records: list[RequestRecord], unit_ns: int = 1000) -> Path:
    write_records(tmp_path / "requests.jsonl", records)
    compact(tmp_path / "requests.jsonl", tmp_path / "records.parquet", unit_ns=unit_ns)
    return tmp_path / "records.parquet"


class TestRoundTrip:
    def test_every_field_comes_back_exactly_but_the_chunk_times(self, tmp_path):
        """Every scalar, None, bool, float, string and text field as written; every chunk time
        within 500 ns of its own (rounded from the row's first token, never accumulated)."""
        records = [every_field_set(i) for i in range(3)] + [failed_record(9), ok_record(10, send_ms=3)]
        back = list(iter_records(store_of(tmp_path, records)))
        assert len(back) == len(records)
        for want, got in zip(records, back):
            w, g = as_dict(want), as_dict(got)
            assert {k: v for k, v in g.items() if k not in LISTS} == {
                k: v for k, v in w.items() if k not in LISTS
            }
            assert (g["chunk_tokens"], g["reasoning_tokens"]) == (w["chunk_tokens"], w["reasoning_tokens"])
            for name in ("chunk_times_ns", "reasoning_times_ns"):
                assert len(g[name]) == len(w[name])
                assert all(abs(a - b) <= 500 for a, b in zip(g[name], w[name])), name
        # The first exact (it is the row's reference), the others whole microseconds after it.
        assert back[0].chunk_times_ns == [5_000_123_456_789, 5_000_139_999_789, 5_000_171_234_789]

    def test_at_a_unit_of_one_nanosecond_chunk_times_are_exact(self, tmp_path):
        """The precision is the store's metadata: at 1 ns every record comes back identical."""
        records = [every_field_set(i) for i in range(3)] + [failed_record(9)]
        back = list(iter_records(store_of(tmp_path, records, unit_ns=1)))
        assert [as_dict(r) for r in back] == [as_dict(r) for r in records]

    def test_errors_never_accumulate_along_a_long_stream(self, tmp_path):
        """A 5,000-chunk stream of 15-30 ms gaps drawn at random nanoseconds: every time
        within 500 ns, the last one too."""
        rng = np.random.default_rng(3)
        times = (1_000_000_000 + np.cumsum(rng.integers(15 * MS, 30 * MS, 5_000))).tolist()
        rec = ok_record(0, chunk_times_ns=times, chunk_tokens=[1] * 5_000, t_first_token_ns=times[0])
        (back,) = iter_records(store_of(tmp_path, [rec]))
        assert np.abs(np.array(back.chunk_times_ns) - np.array(times)).max() <= 500

    def test_the_table_of_the_store_is_the_table_of_the_log(self, tmp_path):
        """Columns, present masks and the exact last-chunk times equal; chunk deltas within 1 µs."""
        records = [every_field_set(i) for i in range(4)] + [failed_record(9), ok_record(10)]
        store = store_of(tmp_path, records)
        a, b = RecordTable.from_file(tmp_path / "requests.jsonl"), read_store(store)
        for name in (*[n for n in a._cols], "t_last_chunk_ns"):
            assert np.array_equal(
                a.column(name), b.column(name), equal_nan=a.column(name).dtype.kind == "f"
            ), name
        assert np.array_equal(a.chunks.counts, b.chunks.counts)
        assert np.abs(a.chunks.deltas.astype(np.int64) - b.chunks.deltas).max() <= 1000
        assert np.array_equal(a.chunks.tokens, b.chunks.tokens)

    def test_a_run_of_several_row_groups_keeps_its_order(self, tmp_path):
        records = [ok_record(i, send_ms=i) for i in range(ROWS_PER_GROUP + 5)]
        store = store_of(tmp_path, records)
        assert pq.ParquetFile(store).num_row_groups == 2
        assert [r.id for r in iter_records(store)] == list(range(ROWS_PER_GROUP + 5))
        assert read_store(store, (ROWS_PER_GROUP - 1, ROWS_PER_GROUP + 1)).column("id").tolist() == [
            ROWS_PER_GROUP - 1,
            ROWS_PER_GROUP,
        ]

    def test_an_empty_log_makes_an_empty_store_with_every_column(self, tmp_path):
        store = store_of(tmp_path, [])
        assert len(read_store(store)) == 0 and list(iter_records(store)) == []
        assert "t_first_token_ns" in pq.ParquetFile(store).schema_arrow.names

    def test_export_writes_the_records_back_as_json_lines(self, tmp_path):
        records = [every_field_set(i) for i in range(2)]
        store = store_of(tmp_path, records, unit_ns=1)
        assert export_jsonl(store, tmp_path / "again.jsonl") == 2
        assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "requests.jsonl").read_bytes()


class TestDamagedLog:
    def test_a_torn_last_line_is_skipped_and_counted(self, tmp_path):
        """A kill -9 between two lines leaves them whole; a disk that filled mid-line, a torn
        tail: skipped, counted, and every whole record kept."""
        records = [ok_record(i) for i in range(5)]
        write_records(tmp_path / "requests.jsonl", records)
        with open(tmp_path / "requests.jsonl", "ab") as fh:
            fh.write(ok_record(5).to_json()[:70])
        report = ReadReport()
        assert compact(tmp_path / "requests.jsonl", tmp_path / "records.parquet", report) == 5
        assert (report.skipped_lines, report.first_skipped) == (1, 6)
        assert [r.id for r in iter_records(tmp_path / "records.parquet")] == [0, 1, 2, 3, 4]

    def test_a_line_of_the_wrong_types_is_skipped_as_the_table_skips_it(self, tmp_path):
        """Text fields stay aligned with their rows when a row in between is dropped."""
        records = [ok_record(i, answer=[f"a{i}"]) for i in range(4)]
        write_records(tmp_path / "requests.jsonl", records[:2])
        with open(tmp_path / "requests.jsonl", "ab") as fh:
            fh.write(records[2].to_json().replace(b'"t_sched_ns":0', b'"t_sched_ns":"soon"') + b"\n")
            fh.write(b"not json\n")
            fh.write(records[3].to_json() + b"\n")
        report = ReadReport()
        compact(tmp_path / "requests.jsonl", tmp_path / "records.parquet", report)
        want = ReadReport()
        RecordTable.from_file(tmp_path / "requests.jsonl", want)
        assert (report.skipped_lines, report.first_skipped) == (want.skipped_lines, want.first_skipped)
        assert report.skipped_lines == 2
        back = list(iter_records(tmp_path / "records.parquet"))
        assert [(r.id, r.answer) for r in back] == [(0, ["a0"]), (1, ["a1"]), (3, ["a3"])]


class TestReader:
    def test_a_folder_is_read_from_its_store_else_its_log(self, tmp_path):
        records = [ok_record(i) for i in range(3)]
        write_records(tmp_path / "requests.jsonl", records)
        assert read_run_table(tmp_path).column("id").tolist() == [0, 1, 2]
        compact(tmp_path / "requests.jsonl", tmp_path / "records.parquet")
        (tmp_path / "requests.jsonl").write_bytes(b"")  # the store wins
        assert read_run_table(tmp_path).column("id").tolist() == [0, 1, 2]

    def test_the_metrics_of_the_store_are_the_logs_within_a_microsecond(self, tmp_path):
        """Counts, the window and every latency statistic: TTFT, TPOT and e2e exactly (scalar
        fields and the exact last chunk), inter-token figures within 1 µs."""
        rng = np.random.default_rng(7)
        records = []
        for i in range(200):
            gaps = tuple(int(g) for g in rng.integers(15, 30, 40))
            rec = ok_record(
                i, send_ms=i * 7, ttft_ms=int(rng.integers(50, 90)), gaps_ms=gaps, tokens=(1,) * 41
            )
            jitter = rng.integers(0, 1_000, 41)  # nanoseconds off the millisecond grid
            rec.chunk_times_ns = [t + int(j) for t, j in zip(rec.chunk_times_ns, jitter)]
            rec.t_first_token_ns = rec.chunk_times_ns[0]
            records.append(rec)
        records += [failed_record(500, send_ms=3)]
        store = store_of(tmp_path, records)
        c1, w1, m1 = metrics.measure(read_records(tmp_path / "requests.jsonl"))
        c2, w2, m2 = metrics.measure(read_store(store))
        assert (c1, w1) == (c2, w2)
        flat1, flat2 = _flat(m1), _flat(m2)
        assert flat1.keys() == flat2.keys()
        for k, v in flat1.items():
            if any(k.startswith(p) for p in ("ttft", "tpot", "e2e", "ttfb")):
                assert flat2[k] == v, k
            elif isinstance(v, float):
                assert flat2[k] == pytest.approx(v, abs=1e-3, rel=1e-6), k  # ms: 1 µs
            else:
                assert flat2[k] == v, k


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out
