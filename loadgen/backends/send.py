"""One request through the transport seam, the same for every protocol: the send, the
per-request timeout (told apart from the run's own cancellation), every failure turned into an
error class on the record, and an ok record's token counts (the server's, a local tokenizer's
or the chunks' and the workload's). ``base.StreamingBackend.send`` calls ``send_stream``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol

from loadgen import records as R
from loadgen.backends.stream import SSEResponse, fail
from loadgen.backends.transports.base import Transport
from loadgen.clock import now_ns


class StreamConsumer(Protocol):
    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None: ...
    def feed(self, t_ns: int, data: bytes) -> bool: ...
    def resent(self, t_ns: int, reason: str) -> None: ...
    def finish(self, t_end: int) -> None: ...


async def stream_request(
    transport: Transport,
    path: str,
    payload: bytes,
    consumer: StreamConsumer,
    rec: R.RequestRecord,
    timeout_s: float,
) -> None:
    """Send one request and push its response into ``consumer``; fill ``rec`` on failure.

    Never raises, except CancelledError when the run itself is stopping (the record is then
    marked cancelled first). The per-request timeout cancels the task and is told apart from
    the run's own cancellation, so a slow server costs one ``timeout``, never the run."""
    task = asyncio.current_task()
    assert task is not None, "stream_request runs inside a task"
    timed_out = False

    def expire() -> None:
        nonlocal timed_out
        timed_out = True
        task.cancel()

    handle = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        rec.t_send_ns = now_ns()
        await transport.post_stream(path, payload, consumer)
        consumer.finish(now_ns())
    except asyncio.CancelledError:
        if not timed_out:
            fail(rec, R.CANCELLED, "the run stopped while this request was in flight")
            raise
        if hasattr(task, "uncancel"):
            task.uncancel()
        fail(rec, R.TIMEOUT, f"no complete response within timeout_s={timeout_s}")
    except Exception as exc:  # noqa: BLE001 - a failing server costs one request, never the run
        if rec.error_class is None:
            cls, msg = transport.classify(exc)
            fail(rec, cls, msg)
    finally:
        handle.cancel()


async def send_stream(
    transport: Transport,
    path: str,
    payload: bytes,
    stream: SSEResponse,
    rec: R.RequestRecord,
    spec: R.RequestSpec,
    timeout_s: float,
    count_tokens: Callable[[str], int] | None,
) -> None:
    """``stream_request``, then the counts of an ok record: per-chunk tokens from a local
    tokenizer when the server gave none (``stream.texts`` kept them), output and prompt
    tokens from the server or, failing that, the chunks and the workload's target."""
    await stream_request(transport, path, payload, stream, rec, timeout_s)
    if not rec.ok:
        return
    if count_tokens is not None and stream.texts is not None and rec.token_source != "continuous_usage":
        rec.chunk_tokens[:] = [max(1, count_tokens(s)) for s in stream.texts]
        rec.token_source = "tokenizer"
    finish_counts(rec, spec)


def finish_counts(rec: R.RequestRecord, spec: R.RequestSpec) -> None:
    """Output tokens default to the chunks' sum, prompt tokens to the workload's target."""
    if rec.output_tokens is None:
        rec.output_tokens = sum(rec.chunk_tokens)
    if rec.prompt_tokens is None:
        rec.prompt_tokens = spec.prompt_tokens
    else:
        rec.prompt_tokens_source = "usage"
