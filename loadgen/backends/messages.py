"""Anthropic's Messages API, streamed: ``POST /v1/messages`` with ``stream: true``.

The protocol, as Anthropic documents it and vLLM's ``/v1/messages`` serves it. Requests carry
the key in ``x-api-key`` (not ``Authorization``) and ``anthropic-version: 2023-06-01``; the
body is ``{model, messages, max_tokens, stream}``, with system turns moved to the top-level
``system`` field (the API takes only user and assistant turns in ``messages``). Each SSE
event's JSON names itself in ``type``:

- ``message_start`` ``{"message": {"id", "usage": {"input_tokens", "output_tokens"}}}``: the
  prompt's token count, before any text.
- ``content_block_start`` / ``content_block_stop``: a text or thinking block opens or closes.
- ``content_block_delta`` with ``delta.type`` ``text_delta`` (``delta.text``): answer text, a
  token-bearing event; ``thinking_delta`` (``delta.thinking``): reasoning, token-bearing and
  counted as chat's ``reasoning_content`` (TTFT counts it, the first answer text is
  ``t_first_content_ns``). Other delta types (``signature_delta``, a tool call's
  ``input_json_delta``, types added later) carry no text tokens and are skipped, as the API's
  versioning policy asks of clients.
- ``message_delta`` ``{"delta": {"stop_reason"}, "usage": {"output_tokens"}}``: the output
  count, cumulative (the last one is the total).
- ``message_stop``: the end. A stream that closes without it is whole when a ``message_delta``
  gave its ``stop_reason`` (ok, ``stream_end: no_terminator``; under ``target.require_done``
  it is ``no_done``); without a stop reason it is ``no_done``.
- ``ping``: keep-alive, skipped. ``error`` ``{"error": {"type", "message"}}``: the server gave
  up mid-stream (``overloaded_error``, ``api_error``, ...), ``server_error_event`` as chat's
  in-stream errors are, the Anthropic type first in the message. Before the stream, an error is
  an HTTP status (429 rate limit, 529 overloaded, ...), classed ``http_<status>`` as any other.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from loadgen import records as R
from loadgen.backends.openai import OpenAIBackend, usage_count
from loadgen.backends.registry import register
from loadgen.backends.stream import SSEResponse, fail

ANTHROPIC_VERSION = "2023-06-01"
_TEXT_KEYS = {"text_delta": ("text", False), "thinking_delta": ("thinking", True)}


class _MessagesStream(SSEResponse):
    """One streamed message: text and thinking deltas are chunks, usage comes in two halves."""

    __slots__ = ("input_tokens", "output_tokens", "stopped")

    def __init__(self, rec: R.RequestRecord, keep_texts: bool) -> None:
        super().__init__(rec, keep_texts)
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.stopped = False

    def on_events(self, t: int, events: list[bytes]) -> bool:
        for data in events:
            try:
                obj = orjson.loads(data)
                kind = obj.get("type")
            except (orjson.JSONDecodeError, AttributeError):
                return self.malformed(t, data)
            if kind == "content_block_delta":
                delta = obj["delta"]
                key, reasoning = _TEXT_KEYS.get(delta["type"], (None, False))
                if key is None:
                    continue  # signature, tool-call JSON, a newer delta type: no text tokens
                text = delta[key]
                if not isinstance(text, str):
                    raise TypeError(f"{delta['type']}.{key} is {type(text).__name__}, not a string")
                if text:
                    self.chunk(t, 1, text, reasoning)
            elif kind == "message_start":
                message = obj["message"]
                rid = message.get("id")
                if self.rec.response_id is None and isinstance(rid, str) and rid:
                    self.rec.response_id = rid
                usage = message.get("usage") or {}
                self.input_tokens = usage_count(usage, "input_tokens")
            elif kind == "message_delta":
                stop = (obj.get("delta") or {}).get("stop_reason")
                if isinstance(stop, str):
                    self.rec.finish_reason = stop
                usage = obj.get("usage") or {}
                n = usage_count(usage, "output_tokens")
                if n is not None:
                    self.output_tokens = n
            elif kind == "message_stop":
                self.stopped = True
            elif kind == "error":
                err = obj.get("error")
                if not isinstance(err, dict):
                    return self.error_event(t, data)
                fail(self.rec, R.SERVER_ERROR_EVENT, f"{err.get('type')}: {str(err.get('message'))[:300]}", t)
                return False
            elif not isinstance(kind, str):
                raise TypeError(f"an event without a string type: {kind!r}")
        return True

    def on_end(self) -> None:
        rec = self.rec
        if not self.stopped:
            if self.strict or rec.finish_reason is None:
                why = "target.require_done is set" if rec.finish_reason is not None else "no stop_reason came"
                fail(rec, R.NO_DONE, f"the stream closed without message_stop ({why})")
                return
            rec.stream_end = R.NO_TERMINATOR
        rec.ok = True
        if self.output_tokens is not None:
            rec.output_tokens = self.output_tokens
            rec.token_source = "usage"
        if self.input_tokens is not None:
            rec.prompt_tokens = self.input_tokens


@register
class MessagesBackend(OpenAIBackend):
    """One RequestSpec -> one streamed ``/v1/messages`` request -> its RequestRecord. The probe
    is chat's: Anthropic and vLLM both list their models at ``/v1/models`` (``data[].id``)."""

    __slots__ = ()
    name = "messages"
    description = "Anthropic Messages API, /v1/messages"
    PATH = "/v1/messages"
    STREAM = _MessagesStream
    messages = True
    text_only = "the Messages API takes text messages, not token ids"
    HEADERS: ClassVar[dict[str, str]] = {"anthropic-version": ANTHROPIC_VERSION}

    @classmethod
    def auth_headers(cls, api_key: str) -> dict[str, str]:
        """Anthropic's key header; no bearer token, so one key is sent once."""
        return {"x-api-key": api_key}

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        o = self.opts
        turns = spec.messages if spec.messages is not None else [{"role": "user", "content": spec.prompt}]
        system = [str(m["content"]) for m in turns if m.get("role") == "system"]
        body: dict[str, Any] = {
            "model": spec.model or o.model,
            "messages": [m for m in turns if m.get("role") != "system"],
            "max_tokens": spec.output_tokens,
            "stream": True,
        }
        if system:
            body["system"] = "\n\n".join(system)
        if o.ignore_eos:
            body["ignore_eos"] = True  # vLLM's extra sampling field; hosted APIs: ignore_eos: false
        if o.extra_body:
            body.update(o.extra_body)
        return body
