"""Records on disk and the client CPU they cost, per streamed token: requests.jsonl against the
columnar store (``output.records: columnar``), in one process, on the same records.

Synthetic records as a streamed run writes them: one token a chunk, the first after 50-300 ms,
then gaps drawn uniformly from 15-30 ms at nanosecond resolution (perf_counter_ns stamps), 1 %
of requests failed with http_503 and no chunk. They are made a block at a time, untimed, and
each goes down the writer path a run uses: ``RequestRecord.to_json`` (a worker process's work)
and ``JsonlSink.write_line`` (the parent's ``write(2)``), timed with ``time.process_time``. The
two modes share that path, so it is timed for each on the same records, interleaved (the two
figures differ by the machine's noise only). Then what each mode does once the load is over:
the columnar run compacts its log into records.parquet (``record_store.compact``), and the
summary reads the records back (``RecordTable.from_file`` of the log against ``read_store``; the
report reads them a second time). Also measured, as the designs not taken: the store at 1 ns
(exact chunk times) and a log whose batches of 8 lines are zstd-compressed by the parent as
they arrive (a compact log during the run, at a CPU cost in the load).

    python bench/record_store.py                       # 100 k requests x 256 tokens
    python bench/record_store.py --requests 10000      # a quicker look

Measured 2026-12-07 on a 2-core VM shared with four other agents' work (the ratios matter more
than the nanoseconds), 100 k requests x 256 tokens (25.3 M tokens):

    see docs/design.md, "Record store", for the table this prints
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.analysis.record_store import compact, read_store
from loadgen.analysis.table import RecordTable
from loadgen.records import JsonlSink, RequestRecord

BLOCK = 1000  # records made at a time (never the whole run in memory as objects)
MS = 1_000_000
FRAME = struct.Struct("<II")  # the compact log's frame: length, crc32


def records(rng: np.random.Generator, first: int, n: int, tokens: int) -> list[RequestRecord]:
    """``n`` records from id ``first``: ok streams of ``tokens`` chunks, 1 % failed."""
    out = []
    sends = 10**12 + (first + np.arange(n)) * 40 * MS
    ttft = rng.integers(50 * MS, 300 * MS, n)
    gaps = rng.integers(15 * MS, 30 * MS + 1, (n, tokens))
    gaps[:, 0] = 0
    for i in range(n):
        send, rid = int(sends[i]), first + i
        if rng.random() < 0.01:
            out.append(
                RequestRecord(
                    rid, False, send, send, tokens, 512, error_class="http_503", http_status=503,
                    t_end_ns=send + 2 * MS, error_message="Service Unavailable",
                )
            )  # fmt: skip
            continue
        times = (send + int(ttft[i]) + np.cumsum(gaps[i])).tolist()
        out.append(
            RequestRecord(
                rid, False, send - 1_000, send, tokens, 512, ok=True, http_status=200,
                response_id=f"chatcmpl-{rid:08x}", t_first_byte_ns=times[0] - 400_000,
                t_first_token_ns=times[0], t_first_content_ns=times[0], t_end_ns=times[-1] + 300_000,
                chunk_times_ns=times, chunk_tokens=[1] * tokens, prompt_tokens=512,
                output_tokens=tokens, token_source="usage", prompt_tokens_source="usage",
                finish_reason="length", stream_end="terminator",
            )
        )  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="record-store-bench-"))
    try:
        run(work, a.requests, a.tokens, a.seed)
    finally:
        shutil.rmtree(work)


def run(work: Path, n: int, tokens: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    warm = work / "warm.jsonl"  # pyarrow's parquet module imported and warmed outside the timing
    with JsonlSink(warm) as s:
        for r in records(rng, 0, 50, tokens):
            s.write(r)
    read_store(_compacted(warm, work / "warm.parquet"))
    logs = {m: work / m / "requests.jsonl" for m in ("jsonl", "columnar")}
    for p in logs.values():
        p.parent.mkdir()
    zlog = work / "zstd.log"
    cpu = {"jsonl": 0.0, "columnar": 0.0, "zstd": 0.0}
    streamed = 0
    zfd = os.open(zlog, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    with JsonlSink(logs["jsonl"]) as sj, JsonlSink(logs["columnar"]) as sc:
        for first in range(0, n, BLOCK):
            block = records(rng, first, min(BLOCK, n - first), tokens)
            streamed += sum(len(r.chunk_times_ns) for r in block)
            for mode, sink in (
                (("jsonl", sj), ("columnar", sc)) if first % 2 else (("columnar", sc), ("jsonl", sj))
            ):
                t0 = time.process_time()
                for r in block:
                    sink.write_line(r.to_json() + b"\n")
                cpu[mode] += time.process_time() - t0
            t0 = time.process_time()  # the design not taken: a compact log, a frame a record
            for r in block:
                data = pa.compress(r.to_json(), codec="zstd", asbytes=True)
                os.write(zfd, FRAME.pack(len(data), zlib.crc32(data)) + data)
            cpu["zstd"] += time.process_time() - t0
    os.close(zfd)
    size_jsonl = logs["jsonl"].stat().st_size

    t0 = time.process_time()
    RecordTable.from_file(logs["jsonl"])
    read_jsonl = time.process_time() - t0

    store = work / "columnar" / "records.parquet"
    t0 = time.process_time()
    compact(logs["columnar"], store)
    compacted = time.process_time() - t0
    logs["columnar"].unlink()
    t0 = time.process_time()
    read_store(store)
    read_columnar = time.process_time() - t0
    exact = work / "exact.parquet"
    compact(logs["jsonl"], exact, unit_ns=1)

    per = 1e9 / streamed
    nan = float("nan")
    print(
        f"{n:,} requests x {tokens} tokens: {streamed:,} streamed tokens (2-core VM, shared: ratios matter)"
    )
    head = ("bytes/token", "load ns/tok", "compact ns/tok", "read ns/tok", "after ns/tok")
    print(f"{'':36}" + "".join(f"{h:>15}" for h in head))
    rows = [
        ("requests.jsonl (jsonl)", size_jsonl, cpu["jsonl"], 0.0, read_jsonl),
        ("records.parquet, 1 us (columnar)", store.stat().st_size, cpu["columnar"], compacted, read_columnar),
        ("records.parquet, 1 ns (not taken)", exact.stat().st_size, cpu["columnar"], nan, nan),
        ("zstd frame a record (not taken)", zlog.stat().st_size, cpu["zstd"], nan, nan),
    ]
    for name, size, load, after, read in rows:
        cells = (size / streamed, load * per, after * per, read * per, (after + 2 * read) * per)
        print(f"{name:36}" + "".join(f"{c:15.2f}" if k == 0 else f"{c:15.0f}" for k, c in enumerate(cells)))
    print(
        "load: to_json + write(2) a record during the load; compact: once the load is over; read: "
        "the summary's read of the records; after: compact + two reads (the summary's, the report's)"
    )


def _compacted(log: Path, store: Path) -> Path:
    compact(log, store)
    return store


if __name__ == "__main__":
    main()
