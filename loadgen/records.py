"""The per-request record: what one request did, in integer nanoseconds.

Every timestamp is ``time.perf_counter_ns()`` in the process that owns the socket (on Linux
that is CLOCK_MONOTONIC, shared by every process on the machine, so a server on loopback can
log on the same clock). Wall time never appears here; a run keeps one wall-clock anchor.

This module is a leaf: anything may import it, it imports nothing of loadgen.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

import orjson

# Error classes. HTTP errors are "http_<status>" (e.g. "http_429"); the rest are fixed names.
CONNECT = "connect"  # could not open the connection (refused, DNS, TLS)
TIMEOUT = "timeout"  # the per-request or read timeout elapsed
READ = "read"  # the connection broke mid-response (reset, EOF inside a chunk)
MALFORMED = "malformed_stream"  # bytes that are not SSE, or an event whose JSON does not parse
NO_DONE = "no_done"  # the stream closed cleanly but never sent its terminator
SERVER_ERROR_EVENT = "server_error_event"  # an in-stream {"error": ...} event
CANCELLED = "cancelled"  # the run stopped (Ctrl-C, duration) while the request was in flight
CLIENT = "client"  # a bug or resource limit on our side; never hidden, always counted


def http_error_class(status: int) -> str:
    return f"http_{status}"


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What one request asks for: built by the workload, sent by a protocol adapter. It lives
    here, beside the record, so the adapters type against it without importing the profile."""

    id: int
    prompt: str | list[int]  # the user text, or the full token-id prompt
    messages: list[dict] | None  # chat endpoint only
    prompt_tokens: int  # exact for token ids or a tokenizer, approximate otherwise
    output_tokens: int  # the max_tokens to request


@dataclass(slots=True)
class RequestRecord:
    """One request, as the client observed it. Field names are the requests.jsonl columns."""

    id: int
    warmup: bool
    t_sched_ns: int  # when the schedule wanted it sent (closed loop: when a slot freed)
    t_send_ns: int  # just before the request bytes were handed to the transport
    requested_output_tokens: int
    requested_prompt_tokens: int
    ok: bool = False
    error_class: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    response_id: str | None = None
    t_first_byte_ns: int | None = None  # first byte of the response body
    t_first_token_ns: int | None = None  # first token-bearing chunk (content or reasoning)
    t_first_content_ns: int | None = None  # first answer (non-reasoning) content
    t_end_ns: int | None = None  # end of stream (or of the failure)
    # Every token-bearing chunk (content and reasoning, in arrival order); role-only and empty
    # deltas, finish and usage events are not chunks.
    chunk_times_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)  # tokens each of those carried
    reasoning_times_ns: list[int] = field(default_factory=list)  # the reasoning subset of them
    reasoning_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None  # server usage.prompt_tokens, else the workload's target
    output_tokens: int | None = None  # server usage.completion_tokens, else sum(chunk_tokens)
    token_source: str = "chunks"  # "usage" | "continuous_usage" | "tokenizer" | "chunks"
    prompt_tokens_source: str = "target"  # "usage" | "target"
    worker: int = 0
    stage: int = 0  # the load stage it belonged to (0 for a single-stage run)

    def to_json(self) -> bytes:
        return orjson.dumps(self, option=orjson.OPT_SERIALIZE_DATACLASS)

    @classmethod
    def from_dict(cls, d: dict) -> "RequestRecord":
        names = _FIELD_NAMES
        return cls(**{k: v for k, v in d.items() if k in names})


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(RequestRecord))
RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RequestRecord))


class JsonlSink:
    """Appends one record per line as each request finishes, flushed so a crash keeps them."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fh: IO[bytes] = open(self.path, "ab", buffering=1 << 16)
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        self._fh.write(record.to_json() + b"\n")
        self.count += 1
        if self.count % 64 == 0:
            self._fh.flush()

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            self._fh.close()

    def __enter__(self) -> "JsonlSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: Path) -> Iterator[RequestRecord]:
    """Read a requests.jsonl back; a torn last line (a killed run) is skipped, not fatal."""
    with open(path, "rb") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                d = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            yield RequestRecord.from_dict(d)


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    with JsonlSink(path) as sink:
        for r in records:
            sink.write(r)
