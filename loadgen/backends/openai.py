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
        task = asyncio.current_task()
        timed_out = False

        def expire() -> None:
            nonlocal timed_out
            timed_out = True
            task.cancel()

        handle = asyncio.get_running_loop().call_later(self.opts.timeout_s, expire)
        try:
            rec.t_send_ns = now_ns()
            async with self.transport.stream_post(self._path, payload) as resp:
                await self._consume(resp, rec)
        except asyncio.CancelledError:
            if not timed_out:
                _fail(rec, R.CANCELLED, "the run stopped while this request was in flight")
                raise
            if hasattr(task, "uncancel"):
                task.uncancel()
            _fail(rec, R.TIMEOUT, f"no complete response within timeout_s={self.opts.timeout_s}")
        except Exception as exc:  # noqa: BLE001 - a failing server costs one request, never the run
            cls, msg = self.transport.classify(exc)
            _fail(rec, cls, msg)
        finally:
            handle.cancel()
        if rec.ok:
            self._finish_counts(rec, spec)

    async def _consume(self, resp: Any, rec: R.RequestRecord) -> None:
        rec.http_status = resp.status
        rid = resp.headers.get("x-request-id")
        if resp.status != 200:
            body = b""
            async for chunk in resp.chunks:
                if rec.t_first_byte_ns is None:
                    rec.t_first_byte_ns = now_ns()
                body += chunk
                if len(body) > _ERROR_BODY_LIMIT:
                    break
            rec.response_id = rid
            _fail(rec, R.http_error_class(resp.status), _error_text(body))
            return

        dec = SSEDecoder()
        loads = orjson.loads
        chat = self._chat
        live = self.live
        times = rec.chunk_times_ns
        counts = rec.chunk_tokens
        usage = None
        prev_completion = 0
        continuous = False
        done = False
        texts: list[str] | None = [] if self._count_tokens is not None else None
        async for raw in resp.chunks:
            t = now_ns()
            if rec.t_first_byte_ns is None:
                rec.t_first_byte_ns = t
            for data in dec.feed(raw):
                if data == b"[DONE]":
                    done = True
                    continue
                try:
                    obj = loads(data)
                    choices = obj.get("choices")
                except (orjson.JSONDecodeError, AttributeError):
                    rec.response_id = rec.response_id or rid
                    _fail(rec, R.MALFORMED, f"unparseable event: {data[:120]!r}")
                    return
                if rec.response_id is None:
                    rec.response_id = obj.get("id") or rid
                u = obj.get("usage")
                if choices:
                    c = choices[0]
                    if chat:
                        d = c.get("delta") or {}
                        text = d.get("content")
                        reasoning = d.get("reasoning_content") or d.get("reasoning")
                    else:
                        text = c.get("text")
                        reasoning = None
                    if text or reasoning:
                        n = 1
                        if u and "completion_tokens" in u:
                            # continuous_usage_stats: the cumulative count says how many tokens
                            # this event really carried (speculative decoding, merged steps).
                            n = u["completion_tokens"] - prev_completion
                            prev_completion = u["completion_tokens"]
                            continuous = True
                            if n < 1:
                                n = 1
                        times.append(t)
                        counts.append(n)
                        live.tokens += n
                        if rec.t_first_token_ns is None:
                            rec.t_first_token_ns = t
                        if reasoning:
                            rec.reasoning_times_ns.append(t)
                            rec.reasoning_tokens.append(n)
                        elif rec.t_first_content_ns is None:
                            rec.t_first_content_ns = t
                        if texts is not None:
                            texts.append(text or reasoning)
                elif "error" in obj:
                    _fail(rec, R.SERVER_ERROR_EVENT, _error_text(data))
                    return
                if u:
                    usage = u
        rec.t_end_ns = now_ns()
        if not done:
            for data in dec.flush():
                done = done or data == b"[DONE]"
        if not done:
            if dec.junk and not times:
                _fail(rec, R.MALFORMED, f"response is not an SSE stream: {(dec.junk_sample or dec.pending[:120])!r}")
            else:
                _fail(rec, R.NO_DONE, "the stream closed without data: [DONE]")
            return
        rec.ok = True
        if usage:
            rec.output_tokens = usage.get("completion_tokens")
            rec.prompt_tokens = usage.get("prompt_tokens")
        if continuous:
            rec.token_source = "continuous_usage"
        elif texts is not None and self._count_tokens is not None:
            counts[:] = [max(1, self._count_tokens(s)) for s in texts]
            rec.token_source = "tokenizer"
        elif usage and rec.output_tokens is not None:
            rec.token_source = "usage"

    @staticmethod
    def _finish_counts(rec: R.RequestRecord, spec: Any) -> None:
        if rec.output_tokens is None:
            rec.output_tokens = sum(rec.chunk_tokens)
        if rec.prompt_tokens is None:
            rec.prompt_tokens = spec.prompt_tokens
        else:
            rec.prompt_tokens_source = "usage"


def _fail(rec: R.RequestRecord, cls: str, message: str) -> None:
    rec.ok = False
    rec.error_class = cls
    rec.error_message = message
    if rec.t_end_ns is None:
        rec.t_end_ns = now_ns()


def _error_text(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    except orjson.JSONDecodeError:
        return body[:300].decode("utf-8", "replace")
