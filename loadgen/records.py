"""The per-request record: what one request did, in integer nanoseconds.

Every timestamp is ``time.perf_counter_ns()`` in the process that owns the socket (on Linux
that is CLOCK_MONOTONIC, shared by every process on the machine, so a server on loopback can
log on the same clock). Wall time never appears here; a run keeps one wall-clock anchor.

This module is a leaf: anything may import it, it imports nothing of loadgen.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

# Error classes. HTTP errors are "http_<status>" (e.g. "http_429"); the rest are fixed names.
CONNECT = "connect"  # could not open the connection (refused, DNS, TLS)
TIMEOUT = "timeout"  # the per-request or read timeout elapsed
READ = "read"  # the connection broke mid-response (reset, EOF inside a chunk)
MALFORMED = "malformed_stream"  # bytes that are not SSE, or an event whose JSON does not parse
NO_DONE = "no_done"  # the stream closed cleanly before its answer finished (no finish, no terminator)
SERVER_ERROR_EVENT = "server_error_event"  # an in-stream {"error": ...} event
CANCELLED = "cancelled"  # the run stopped (Ctrl-C, duration) while the request was in flight
CLIENT = "client"  # a bug or resource limit on our side; never hidden, always counted
WORKER_LOST = "worker_lost"  # the worker process sending it died while it was in flight

# How an ok stream ended (``RequestRecord.stream_end``).
TERMINATOR = "terminator"  # the protocol's end marker arrived
NO_TERMINATOR = "no_terminator"  # the answer finished and the body ended, but no end marker came
END_OF_BODY = "end_of_body"  # the protocol has no end marker: the response's end is the stream's
STREAM_ENDS = (TERMINATOR, NO_TERMINATOR, END_OF_BODY)


def http_error_class(status: int) -> str:
    return f"http_{status}"


def grpc_error_class(code: str) -> str:
    """A gRPC call that ended with a status other than OK: ``grpc_<code>`` in lower case
    (``grpc_unavailable``, ``grpc_invalid_argument``). A refused connection is ``connect`` and a
    deadline ``timeout``, as over HTTP; every other status keeps its own name rather than
    borrowing an HTTP code the server never sent."""
    return f"grpc_{code.lower()}"


def set_media(rec: RequestRecord, media: tuple[MediaPart, ...]) -> None:
    """The record's media columns from what its request carries (nothing when it carries none)."""
    if not media:
        return
    images = [m for m in media if m.kind == "image"]
    clips = [m for m in media if m.kind == "audio"]
    rec.images, rec.audio_clips = len(images), len(clips)
    rec.media_bytes = sum(m.nbytes for m in media)
    if images:
        rec.megapixels = sum(m.pixels for m in images) / 1e6
    if clips:
        rec.audio_s = sum(m.seconds for m in clips)


@dataclass(frozen=True, slots=True)
class MediaPart:
    """One image or audio clip a chat request carries in its user message (OpenAI's content
    parts). Inline media are base64 the workload encoded once per run; a URL the user gave is
    passed through, never fetched, so its bytes, pixels and seconds are unknown (0)."""

    kind: str  # "image" | "audio"
    payload: str  # an image's URL (``data:image/png;base64,...`` or the user's), audio's base64 or URL
    fmt: str  # "png" | "jpeg" | ... for images, "wav" for audio; "url" for a passed-through URL
    nbytes: int = 0  # bytes of the media file sent inline (its base64 is 4/3 of that on the wire)
    pixels: int = 0  # an image's width x height
    seconds: float = 0.0  # an audio clip's duration


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What one request asks for: built by the workload, sent by a protocol adapter. It lives
    here, beside the record, so the adapters type against it without importing the profile."""

    id: int
    prompt: str | list[int]  # the user text, or the full token-id prompt
    messages: list[dict[str, Any]] | None  # chat endpoint only
    prompt_tokens: int  # exact for token ids or a tokenizer, approximate otherwise
    output_tokens: int  # the max_tokens to request
    expected: str | None = None  # the answer a right reply gives (the quality axis)
    match: str = "exact"  # how the answer is scored against it: "exact" | "contains"
    session_id: int | None = None  # multi-turn: the conversation it belongs to
    turn: int | None = None  # multi-turn: its place in that conversation, from 1
    model: str | None = None  # a LoRA mix's pick for it; None: the run's target.model
    # A batch protocol's items (embeddings: the inputs; rerank: the documents, ``prompt`` being
    # the query); None for a protocol that sends one prompt.
    inputs: tuple[str, ...] | None = None
    # Their token counts, one a sequence the server runs: each input's, or each query+document
    # pair's (what a context limit applies to: the items, not their sum).
    item_tokens: tuple[int, ...] | None = None

    @property
    def items(self) -> int | None:
        """How many items the request carries (None: one prompt, not a batch)."""
        return None if self.inputs is None else len(self.inputs)

    # An agent's request (chat): the function tools it offers and its tool_choice, or the
    # response_format whose JSON schema its answer is validated against.
    tools: tuple[dict[str, Any], ...] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    media: tuple[MediaPart, ...] = ()  # images and audio in the user message (chat only)


@dataclass(slots=True)
class RequestRecord:
    """One request, as the client observed it. Field names are the requests.jsonl columns."""

    id: int
    warmup: bool
    t_sched_ns: int  # when the schedule wanted it sent (closed loop: when a slot freed)
    t_send_ns: int  # just before the request bytes were handed to the transport (the answered attempt)
    requested_output_tokens: int
    requested_prompt_tokens: int
    ok: bool = False
    error_class: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    retry_after_s: float | None = None  # a 429/503's Retry-After: the server asked for a back-off
    # 2 when the request was sent again on a fresh connection because the reused one it first
    # went out on ended before any byte of the answer (the only retry loadgen ever makes).
    attempts: int = 1
    retry_reason: str | None = None
    response_id: str | None = None
    t_first_byte_ns: int | None = None  # first byte of the response body
    t_first_token_ns: int | None = None  # first token-bearing chunk (content or reasoning)
    t_first_content_ns: int | None = None  # first answer (non-reasoning) content
    t_first_tool_ns: int | None = None  # first token of a tool call (its name or arguments)
    t_end_ns: int | None = None  # end of stream (or of the failure)
    # HTTP phases of the answered attempt, stamped by the transport as close to the socket as it
    # gets (httptools and httpx; aiohttp leaves them None); docs/metrics.md defines each. A request
    # on a reused connection has no connection stamps (t_conn_start_ns .. t_tls_ns are None).
    conn_reused: bool | None = None  # it went out on a connection that had carried a request before
    t_conn_start_ns: int | None = None  # a fresh connection: the transport began opening it (resolving)
    t_dns_ns: int | None = None  # the host's addresses known (at once for an IP literal; httpx: only then)
    t_connect_ns: int | None = None  # the TCP handshake done
    t_tls_ns: int | None = None  # the TLS handshake done (https:// only)
    t_written_ns: int | None = None  # the request's last byte handed to the kernel
    t_last_byte_ns: int | None = None  # the read that carried the response's last byte
    # Every token-bearing chunk (content and reasoning, in arrival order); role-only and empty
    # deltas, finish and usage events are not chunks.
    chunk_times_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)  # tokens each of those carried
    reasoning_times_ns: list[int] = field(default_factory=list)  # the reasoning subset of them
    reasoning_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None  # server usage.prompt_tokens, else the workload's target
    output_tokens: int | None = None  # server usage.completion_tokens, else sum(chunk_tokens)
    # What the server said it spent on this request (llama.cpp's per-response ``timings``): its
    # prompt processing and its generation in ms, and the tokens generated in that time.
    server_prompt_ms: float | None = None
    server_predicted_ms: float | None = None
    server_predicted_tokens: int | None = None
    token_source: str = "chunks"  # "usage" | "continuous_usage" | "tokenizer" | "chunks"
    prompt_tokens_source: str = "target"  # "usage" | "target"
    worker: int = 0
    # The replica it went to (its index in target.urls; the summary's replicas block names
    # each one's URL, credentials redacted); None for a run against one URL.
    replica: int | None = None
    stage: int = 0  # the load stage it belonged to (0 for a single-stage run)
    session_id: int | None = None  # multi-turn: the conversation, and the request's turn in it
    turn: int | None = None
    model: str | None = None  # the model (adapter) it asked for, when the run mixes them
    items: int | None = None  # a batch protocol's inputs (embeddings) or documents (rerank) sent
    finish_reason: str | None = None  # the server's: "stop", "length", "tool_calls", ...
    # How an ok stream ended: "terminator" (the protocol's end marker: OpenAI's and SGLang's
    # ``data: [DONE]``, ``message_stop``, ``response.completed``, Triton's final flag),
    # "no_terminator" (the body ended cleanly after the answer's finish, but the marker the
    # protocol promises never came: accepted, as the OpenAI SDK accepts it, and counted), or
    # "end_of_body" (a protocol whose stream ends with the response: Triton's generate).
    stream_end: str | None = None
    # Tool calls the answer made (chat ``delta.tool_calls``): how many and their function
    # names; their ids and arguments (``tool_call_args``) only while the answer is read (a
    # next round sends them back) or kept.
    tool_calls: int = 0
    tool_names: list[str] | None = None
    tool_call_args: list[dict[str, str]] | None = None
    json_valid: bool | None = None  # a response_format answer: parsed and valid against the schema
    # Media in the prompt (workload.images / workload.audio / a dataset's media columns): how
    # many images and audio clips, the bytes of their files sent inline, the images' megapixels
    # and the clips' seconds (None without any). A URL passed through adds a count, nothing else.
    images: int = 0
    audio_clips: int = 0
    media_bytes: int = 0
    megapixels: float | None = None
    audio_s: float | None = None
    # The quality axis, when the run keeps answers (output.answers) or scores them: a digest of
    # the exact prompt sent (runs compare answers only on identical prompts), the answer's
    # content as the streamed pieces (one a chunk, about one token each; cut to a budget),
    # and whether it matched the request's expected answer.
    prompt_hash: str | None = None
    answer: list[str] | None = None
    answer_truncated: bool = False
    correct: bool | None = None

    @property
    def counted_output_tokens(self) -> int:
        """The output tokens a throughput counts for this request: its ``output_tokens`` (the
        server's usage, else the sum of its chunks) when it succeeded, none when it failed. The
        summary's ``output_tokens_per_s`` counts so, and every live counter uses this property,
        so the progress bar, the dashboard and the file agree on what a token is."""
        return (self.output_tokens or 0) if self.ok else 0

    def to_json(self) -> bytes:
        return orjson.dumps(self, option=orjson.OPT_SERIALIZE_DATACLASS)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        names = _FIELD_NAMES
        return cls(**{k: v for k, v in d.items() if k in names})


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(RequestRecord))
TEXT_FIELDS: tuple[str, ...] = (
    "answer",
    "tool_names",
    "tool_call_args",
)  # free text: in requests.jsonl, never in a record table


class SinkError(OSError):
    """requests.jsonl cannot take another record (disk full, folder removed, I/O error)."""


class JsonlSink:
    """Appends one record per line, in one ``write(2)`` as each request finishes.

    Durability by design: the file is opened ``O_APPEND`` and every record goes to the kernel
    whole, the moment it finishes, so a ``kill -9`` loses only requests still in flight and
    never tears a line that was written (a buffered writer lost up to 64 finished records).
    Nothing is fsynced: a killed process keeps what the kernel has; a lost machine is beyond a
    client. A failing disk or a removed run folder does not raise into the load: ``write``
    stops taking records, keeps the reason in ``error`` and calls ``on_error`` once, so the
    caller can stop the run and say what was saved.
    """

    def __init__(self, path: Path, on_error: Callable[[SinkError], None] | None = None) -> None:
        self.path = Path(path)
        self._fd = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644
        )
        self._on_error = on_error
        self.count = 0  # records written whole
        self.offset = os.fstat(self._fd).st_size  # bytes in the file: where the next line starts
        self.error: SinkError | None = None

    def write(self, record: RequestRecord) -> None:
        self.write_line(record.to_json() + b"\n")

    def write_line(self, line: bytes, records: int = 1) -> None:
        """Whole JSON lines, newlines included (worker processes serialised them): one record's,
        or ``records`` lines that arrived together, in one write."""
        if self.error is not None:
            return
        written = 0
        try:
            written = os.write(self._fd, line)
            while written < len(line):  # a short write: the disk filled up mid-line
                n = os.write(self._fd, line[written:])
                if n == 0:
                    raise OSError(errno.ENOSPC, "no space left on device")
                written += n
            if os.fstat(self._fd).st_nlink == 0:
                raise OSError(errno.ENOENT, "the file was deleted while the run was writing it")
        except OSError as exc:
            if 0 < written < len(line):
                self._untear(written)
            self._fail(exc)
            return
        self.count += records
        self.offset += len(line)

    def _untear(self, written: int) -> None:
        """Cut the part of a line the disk took before it filled up: the file ends whole."""
        try:
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
        except OSError:
            pass  # the reader still skips a torn last line, and says so

    def _fail(self, exc: OSError) -> None:
        self.error = SinkError(exc.errno, f"cannot write {self.path}: {exc.strerror or exc}")
        if self._on_error is not None:
            self._on_error(self.error)

    def flush(self) -> None:
        """Nothing to flush: every record went to the kernel when it was written."""

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(slots=True)
class ReadReport:
    """What reading a requests.jsonl skipped: lines that did not parse (a killed run's torn
    last line, or damage), so a reader can say how many."""

    skipped_lines: int = 0
    first_skipped: int | None = None  # 1-based line number


def read_records(path: Path, report: ReadReport | None = None) -> Iterator[RequestRecord]:
    """Read a requests.jsonl back; an unparseable line is skipped and counted in ``report``."""
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = orjson.loads(line)
                rec = RequestRecord.from_dict(d) if isinstance(d, dict) else None
            except (orjson.JSONDecodeError, TypeError):
                rec = None
            if rec is None:
                if report is not None:
                    report.skipped_lines += 1
                    report.first_skipped = report.first_skipped or n
                continue
            yield rec


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    with JsonlSink(path) as sink:
        for r in records:
            sink.write(r)
