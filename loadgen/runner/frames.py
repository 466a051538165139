"""The wire between a run's parent and its worker processes: length-prefixed frames on a pipe.

A frame is a 5-byte header (payload length, one kind byte) and a payload. Commands (parent to
worker) and control replies are pickles: both ends are the same loadgen, the parent started
the worker, and nothing from the network is ever unpickled. Records travel as the exact JSON
line the worker would have written (already scrubbed of secrets), behind a small fixed struct
the parent reads for its counters without parsing the JSON; the parent writes the line to
requests.jsonl as it is, so a record's bytes are made once, in the process that measured it.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

HEADER = struct.Struct("<IB")
# worker -> parent
HELLO = ord("H")  # pickle: {"pid", "host", "boot_id"}
READY = ord("K")  # pickle: None (the job is set up: transport, backend, specs)
PONG = ord("P")  # struct q: the worker's now_ns when the ping arrived
STARTED = ord("N")  # STARTED_STRUCT: a request was handed to the backend
RECORD = ord("R")  # RECORD_STRUCT + the record's JSON line (with its newline)
DONE = ord("D")  # pickle: the stage's StageStats
FAILED = ord("E")  # pickle: str, why the worker cannot go on
# parent -> worker
JOB = ord("J")  # pickle: WorkerJob
PING = ord("p")  # empty
STAGE = ord("S")  # pickle: StageOrder
STOP = ord("X")  # empty: cancel what is in flight, finish the stage as interrupted
QUIT = ord("Q")  # empty: close and exit

STARTED_STRUCT = struct.Struct("<qqBqq")  # id, t_sched_ns, warmup, requested out, requested prompt
RECORD_STRUCT = struct.Struct("<qBq")  # id, status, counted_output_tokens (progress only)
FAILED_, OK, CANCELLED_ = 0, 1, 2  # a record's status
PONG_STRUCT = struct.Struct("<q")


def frame(kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind) + payload


def pickled(kind: int, obj: Any) -> bytes:
    return frame(kind, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes] | None:
    """The next frame, or None at a clean or broken end of the stream (the peer is gone)."""
    try:
        head = await reader.readexactly(HEADER.size)
        size, kind = HEADER.unpack(head)
        return kind, await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def unpickle(payload: bytes) -> Any:
    return pickle.loads(payload)
