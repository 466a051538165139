"""A run with ``output.records: columnar`` over real loopback sockets: its records end in
records.parquet (no requests.jsonl left), each the server's response, and every command that
reads a run reads it: the summary, the stages, ``load_records``, the report, compare (output
agreement included), gate, repeats and ``loadgen records`` (export and compaction)."""

from __future__ import annotations

import json

import pytest

from loadgen.analysis.record_store import compact, iter_records
from loadgen.records import read_records
from loadgen.result import REQUESTS, STORE, RunResult, load_records
from loadgen.testing import StreamServer

from helpers import cli, profile, run

N = 24


@pytest.fixture(scope="module")
def server():
    with StreamServer(ttft_ms=2, itl_ms=1) as srv:
        yield srv


@pytest.fixture(scope="module")
def runs(server, tmp_path_factory):
    """The same load twice, as jsonl and as columnar, answers kept; the server's log of each."""
    out = tmp_path_factory.mktemp("runs")
    made, logs = {}, {}
    for kind in ("jsonl", "columnar"):
        server.clear_log()
        made[kind] = run(
            profile(
                out,
                server.url,
                workload__num_requests=N,
                workload__output_tokens=12,
                load__concurrency=3,
                output__run_id=kind,
                output__records=kind,
                output__answers__keep=True,
                server_metrics__enabled=False,
                target__preflight=False,  # the server's log holds the run's requests only
            )
        )
        logs[kind] = server.log()
    return made, logs


def test_a_columnar_run_keeps_every_response_in_its_store_and_no_log(runs):
    made, logs = runs
    res = made["columnar"]
    assert (res.run_dir / STORE).is_file() and not (res.run_dir / REQUESTS).exists()
    records = load_records(res.run_dir)
    assert sorted(r.response_id for r in records) == sorted(logs["columnar"])
    assert all(r.ok and r.answer and len(r.chunk_times_ns) == 12 for r in records)
    assert res.summary["counts"]["ok"] == N and len(RunResult.load(res.run_dir).table) == N


def test_the_summary_of_a_columnar_run_is_the_jsonl_runs_in_its_counts_and_lengths(runs):
    made, _ = runs
    a, b = made["jsonl"].summary, made["columnar"].summary
    assert a["counts"] == b["counts"]
    assert a["conditions"]["lengths"] == b["conditions"]["lengths"]


def test_report_compare_and_gate_read_a_columnar_run(runs, tmp_path):
    made, _ = runs
    j, c = made["jsonl"].run_dir, made["columnar"].run_dir
    proc = cli("report", str(c), "-o", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "report" / "requests.csv").read_text().splitlines()
    assert len(rows) == N + 1 and (tmp_path / "report" / "requests.parquet").is_file()
    proc = cli("compare", str(j), str(c), "-o", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    compare = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    agreement = compare["output_agreement"]["runs"]["columnar"]
    assert (agreement["identical"], agreement["compared"]) == (N, N)
    proc = cli("gate", "--baseline", str(j), str(c), "--allow-different", "--json", str(tmp_path / "g.json"))
    assert proc.returncode in (0, 1), proc.stderr  # a verdict either way: both runs were read
    assert json.loads((tmp_path / "g.json").read_text())["rules"]


def test_records_export_gives_back_the_jsonl_runs_lines_field_for_field(runs, tmp_path):
    """``loadgen records RUN --jsonl``: requests.jsonl from the store, every record whole."""
    made, _ = runs
    c = made["columnar"].run_dir
    proc = cli("records", str(c), "--jsonl")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {c / REQUESTS}: {N} records" in proc.stdout
    exported = list(read_records(c / REQUESTS))
    assert [r.response_id for r in exported] == [r.response_id for r in iter_records(c / STORE)]
    assert all(r.answer for r in exported)
    (c / REQUESTS).unlink()


def test_records_compact_turns_a_jsonl_run_into_a_store(runs, tmp_path):
    made, _ = runs
    j = made["jsonl"].run_dir
    before = list(read_records(j / REQUESTS))
    proc = cli("records", str(j), "--compact", "--keep-log")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {j / STORE}: {N} records" in proc.stdout
    assert "bytes per streamed chunk" in proc.stdout
    assert [r.response_id for r in iter_records(j / STORE)] == [r.response_id for r in before]
    (j / STORE).unlink()


def test_records_says_what_is_missing_without_a_traceback(tmp_path):
    proc = cli("records", str(tmp_path), "--jsonl")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{tmp_path / STORE} is missing" in proc.stderr


def test_each_stage_of_a_columnar_sweep_reads_its_own_rows(server, tmp_path):
    """The stages are summarised from the store's row spans once the log is gone."""
    res = run(
        profile(
            tmp_path,
            server.url,
            workload__num_requests=6,
            load__concurrency=None,
            load__sweep={"concurrency": [1, 2]},
            output__records="columnar",
            server_metrics__enabled=False,
        )
    )
    assert not (res.run_dir / REQUESTS).exists()
    stages = res.summary["stages"]
    assert [s["counts"]["ok"] for s in stages] == [6, 6]
    assert [r.stage for r in load_records(res.run_dir)] == [0] * 6 + [1] * 6


def test_repeats_of_a_columnar_run_pool_their_stores(server, tmp_path):
    res = run(
        profile(
            tmp_path,
            server.url,
            workload__num_requests=5,
            load__repeats=2,
            output__records="columnar",
            server_metrics__enabled=False,
        )
    )
    assert (res.run_dir / STORE).is_file() and not (res.run_dir / REQUESTS).exists()
    assert len(load_records(res.run_dir)) == 10
    assert [len(load_records(res.run_dir / f"repeat-{k}")) for k in (1, 2)] == [5, 5]


def test_a_store_left_by_compaction_is_read_before_a_log(tmp_path, runs):
    made, _ = runs
    src = made["jsonl"].run_dir / REQUESTS
    (tmp_path / REQUESTS).write_bytes(src.read_bytes())
    compact(tmp_path / REQUESTS, tmp_path / STORE)
    (tmp_path / REQUESTS).write_bytes(b"")
    assert len(load_records(tmp_path)) == N
