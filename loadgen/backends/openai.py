"""OpenAI-compatible streaming: chat completions and completions, as every engine serves them.

Hot path, per read: stamp the clock, split SSE, and per event parse one small JSON object and
look at three keys. Nothing else happens until the stream ends (token counting with a
tokenizer, usage bookkeeping), so a busy client adds as little as possible to what it measures.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import orjson

from loadgen import records as R
from loadgen.backends.sse import SSEDecoder
from loadgen.backends.transports import Transport
from loadgen.clock import now_ns

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_ERROR_BODY_LIMIT = 4096


@dataclass(slots=True)
class Live:
    """Counters the progress display reads; the hot path only ever adds to them."""

    in_flight: int = 0
    done: int = 0
    errors: int = 0
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class OpenAIOptions:
    endpoint: str  # "chat" | "completions"
    model: str
    ignore_eos: bool = True
    include_usage: bool = True
    continuous_usage_stats: bool = False
    extra_body: Mapping[str, Any] | None = None
    timeout_s: float = 600.0


class OpenAIBackend:
    """Turns a RequestSpec into one streamed request and fills its RequestRecord."""

    def __init__(self, opts: OpenAIOptions, transport: Transport, live: Live | None = None,
                 count_tokens: Callable[[str], int] | None = None) -> None:
        self.opts = opts
        self.transport = transport
        self.live = live or Live()
        self._count_tokens = count_tokens
        self._path = PATHS[opts.endpoint]
        self._chat = opts.endpoint == "chat"

    def body(self, spec: Any) -> dict:
        o = self.opts
        body: dict[str, Any] = {"model": o.model, "max_tokens": spec.output_tokens, "stream": True}
        if self._chat:
            body["messages"] = spec.messages
        else:
            body["prompt"] = spec.prompt
        if o.ignore_eos:
            body["ignore_eos"] = True
        if o.include_usage or o.continuous_usage_stats:
            so: dict[str, Any] = {"include_usage": True}
            if o.continuous_usage_stats:
                so["continuous_usage_stats"] = True
            body["stream_options"] = so
        if o.extra_body:
            body.update(o.extra_body)
        return body

    async def send(self, spec: Any, rec: R.RequestRecord) -> None:
        """Fill ``rec``; never raises, except CancelledError when the run itself is stopping."""
        payload = orjson.dumps(self.body(spec))
        stream = _Stream(rec, self._chat, self.live, self._count_tokens is not None)
        task = asyncio.current_task()
        timed_out = False

        def expire() -> None:
            nonlocal timed_out
            timed_out = True
            task.cancel()

        handle = asyncio.get_running_loop().call_later(self.opts.timeout_s, expire)
        try:
            rec.t_send_ns = now_ns()
            await self.transport.post_stream(self._path, payload, stream)
            stream.finish(now_ns())
        except asyncio.CancelledError:
            if not timed_out:
                _fail(rec, R.CANCELLED, "the run stopped while this request was in flight")
                raise
            if hasattr(task, "uncancel"):
                task.uncancel()
            _fail(rec, R.TIMEOUT, f"no complete response within timeout_s={self.opts.timeout_s}")
        except Exception as exc:  # noqa: BLE001 - a failing server costs one request, never the run
            if rec.error_class is None:
                cls, msg = self.transport.classify(exc)
                _fail(rec, cls, msg)
        finally:
            handle.cancel()
        if rec.ok:
            if stream.texts is not None and rec.token_source != "continuous_usage":
                rec.chunk_tokens[:] = [max(1, self._count_tokens(s)) for s in stream.texts]
                rec.token_source = "tokenizer"
            self._finish_counts(rec, spec)

    @staticmethod
    def _finish_counts(rec: R.RequestRecord, spec: Any) -> None:
        if rec.output_tokens is None:
            rec.output_tokens = sum(rec.chunk_tokens)
        if rec.prompt_tokens is None:
            rec.prompt_tokens = spec.prompt_tokens
        else:
            rec.prompt_tokens_source = "usage"


class _Stream:
    """Push-style consumer of one response: the transport calls ``head`` then ``feed`` per read
    (with the read's arrival time); ``finish`` when the body is complete."""

    __slots__ = ("rec", "chat", "live", "dec", "error_body", "done", "usage", "prev_completion",
                 "continuous", "texts", "rid")

    def __init__(self, rec: R.RequestRecord, chat: bool, live: Live, keep_texts: bool) -> None:
        self.rec = rec
        self.chat = chat
        self.live = live
        self.dec = SSEDecoder()
        self.error_body: bytes | None = None
        self.done = False
        self.usage: dict | None = None
        self.prev_completion = 0
        self.continuous = False
        self.texts: list[str] | None = [] if keep_texts else None
        self.rid: str | None = None

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        rec = self.rec
        rec.http_status = status
        rec.t_first_byte_ns = t_ns
        self.rid = headers.get("x-request-id")
        if status != 200:
            self.error_body = b""

    def feed(self, t: int, raw: bytes) -> bool:
        rec = self.rec
        if self.error_body is not None:
            self.error_body += raw
            return len(self.error_body) <= _ERROR_BODY_LIMIT
        events = self.dec.feed(raw)
        if not events:
            return True
        loads = orjson.loads
        times = rec.chunk_times_ns
        counts = rec.chunk_tokens
        chat = self.chat
        tokens = 0
        try:
            for data in events:
                if data == b"[DONE]":
                    self.done = True
                    continue
                try:
                    obj = loads(data)
                    choices = obj.get("choices")
                except (orjson.JSONDecodeError, AttributeError):
                    _fail(rec, R.MALFORMED, f"unparseable event: {data[:120]!r}", t)
                    return False
                if rec.response_id is None:
                    rec.response_id = obj.get("id") or self.rid
                u = obj.get("usage")
                if u:
                    self.usage = u  # the last one seen is the total (final chunk or continuous)
                if choices:
                    c = choices[0]
                    reasoning = None
                    if chat:
                        d = c.get("delta") or {}
                        text = d.get("content")
                        if not text:
                            reasoning = d.get("reasoning_content") or d.get("reasoning")
                            if not reasoning:
                                continue  # role-only or empty delta: not a token
                    else:
                        text = c.get("text")
                        if not text:
                            continue
                    n = 1
                    if u and "completion_tokens" in u:
                        # continuous_usage_stats: the cumulative count says how many tokens
                        # this event really carried (speculative decoding, merged steps).
                        n = u["completion_tokens"] - self.prev_completion
                        self.prev_completion = u["completion_tokens"]
                        self.continuous = True
                        if n < 1:
                            n = 1
                    times.append(t)
                    counts.append(n)
                    tokens += n
                    if rec.t_first_token_ns is None:
                        rec.t_first_token_ns = t
                    if reasoning:
                        rec.reasoning_times_ns.append(t)
                        rec.reasoning_tokens.append(n)
                    elif rec.t_first_content_ns is None:
                        rec.t_first_content_ns = t
                    if self.texts is not None:
                        self.texts.append(text or reasoning)
                elif "error" in obj:
                    _fail(rec, R.SERVER_ERROR_EVENT, _error_text(data), t)
                    return False
        finally:
            self.live.tokens += tokens
        return True

    def finish(self, t_end: int) -> None:
        rec = self.rec
        if rec.error_class is not None:
            return
        rec.t_end_ns = t_end
        if rec.response_id is None:
            rec.response_id = self.rid
        if self.error_body is not None:
            _fail(rec, R.http_error_class(rec.http_status), _error_text(self.error_body))
            return
        if not self.done:
            self.done = any(d == b"[DONE]" for d in self.dec.flush())
        if not self.done:
            if self.dec.junk and not rec.chunk_times_ns:
                sample = self.dec.junk_sample or self.dec.pending[:120]
                _fail(rec, R.MALFORMED, f"response is not an SSE stream: {sample!r}")
            else:
                _fail(rec, R.NO_DONE, "the stream closed without data: [DONE]")
            return
        rec.ok = True
        usage = self.usage
        if usage:
            rec.output_tokens = usage.get("completion_tokens")
            rec.prompt_tokens = usage.get("prompt_tokens")
        if self.continuous:
            rec.token_source = "continuous_usage"
        elif usage and rec.output_tokens is not None:
            rec.token_source = "usage"


def _fail(rec: R.RequestRecord, cls: str, message: str, t_ns: int | None = None) -> None:
    rec.ok = False
    rec.error_class = cls
    rec.error_message = message
    if rec.t_end_ns is None:
        rec.t_end_ns = t_ns or now_ns()


def _error_text(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    except orjson.JSONDecodeError:
        return body[:300].decode("utf-8", "replace")
