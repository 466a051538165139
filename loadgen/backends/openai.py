"""OpenAI-compatible streaming: chat completions and completions, as every engine serves them.

Hot path, per read: stamp the clock, split SSE, and per event parse one small JSON object and
look at three keys. Nothing else happens until the stream ends (token counting with a
tokenizer, usage bookkeeping), so a busy client adds as little as possible to what it measures.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import orjson

from loadgen.redact import redact_url
from loadgen import records as R
from loadgen.backends.base import (server_headers, Live, ProbeError, SSEResponse, get_json, send_stream,
                                   unreachable)
from loadgen.backends.transports.base import Transport

__all__ = ["Live", "OpenAIBackend", "OpenAIOptions", "PATHS"]

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


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

    @classmethod
    def for_target(cls, target: Any, model: str, transport: Transport, live: Live,
                   count_tokens: Callable[[str], int] | None = None) -> "OpenAIBackend":
        """The backend for a profile's ``target`` section."""
        t = target
        return cls(OpenAIOptions(
            endpoint=t.endpoint, model=model, ignore_eos=t.ignore_eos, include_usage=t.include_usage,
            continuous_usage_stats=t.continuous_usage_stats, extra_body=t.extra_body,
            timeout_s=t.timeout_s), transport, live, count_tokens)

    @staticmethod
    async def probe(transport: Transport, url: str, model: str | None) -> tuple[dict, str]:
        """What the server says about itself (``/v1/models``, ``/version``, headers) and the
        model to request: ``model``, else the first one listed. Raises ProbeError when the
        server is unreachable or names no model and none was given."""
        info: dict[str, Any] = {}
        try:
            status, headers, body = await get_json(transport, "/v1/models")
        except Exception as exc:  # noqa: BLE001 - any failure here means "cannot reach it"
            raise unreachable(transport, url, "/v1/models", exc) from None
        info["models_status"] = status
        info["headers"] = server_headers(headers)
        info["models"] = body if status == 200 else None
        with contextlib.suppress(Exception):
            st, _h, version = await get_json(transport, "/version", timeout_s=5.0)
            if st == 200 and version is not None:
                info["version"] = version
        if model:
            return info, model
        data = (info["models"] or {}).get("data") or []
        if not data:
            raise ProbeError(f"{redact_url(url)}/v1/models lists no model "
                             f"(HTTP {status}); set target.model (--model NAME)")
        return info, data[0]["id"]

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
        await send_stream(self.transport, self._path, payload, stream, rec, spec,
                          self.opts.timeout_s, self._count_tokens)


class _Stream(SSEResponse):
    """Push-style consumer of one response: the transport calls ``head`` then ``feed`` per read
    (with the read's arrival time); ``finish`` when the body is complete (see SSEResponse)."""

    __slots__ = ("chat", "usage", "prev_completion", "continuous")
    requires_done = True

    def __init__(self, rec: R.RequestRecord, chat: bool, live: Live, keep_texts: bool) -> None:
        super().__init__(rec, live, keep_texts)
        self.chat = chat
        self.usage: dict | None = None
        self.prev_completion = 0
        self.continuous = False

    def on_events(self, t: int, events: list[bytes]) -> bool:
        rec = self.rec
        loads = orjson.loads
        chat = self.chat
        for data in events:
            try:
                obj = loads(data)
                choices = obj.get("choices")
            except (orjson.JSONDecodeError, AttributeError):
                return self.malformed(t, data)
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
                self.chunk(t, n, text or reasoning, reasoning is not None)
            elif "error" in obj:
                return self.error_event(t, data)
        return True

    def on_end(self) -> None:
        rec = self.rec
        rec.ok = True
        usage = self.usage
        if usage:
            rec.output_tokens = usage.get("completion_tokens")
            rec.prompt_tokens = usage.get("prompt_tokens")
        if self.continuous:
            rec.token_source = "continuous_usage"
        elif usage and rec.output_tokens is not None:
            rec.token_source = "usage"
