"""OpenAI's Responses API, streamed: ``POST /v1/responses`` with ``stream: true``.

The protocol, as OpenAI documents it and vLLM's ``/v1/responses`` serves it: every SSE event's
JSON names itself in ``type`` (the ``event:`` line repeats it; the decoder drops that line).

- ``response.created`` / ``response.in_progress``: the response object, no text yet.
- ``response.output_text.delta`` ``{"delta": "..."}``: answer text, a token-bearing event.
- ``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta``: reasoning,
  token-bearing and counted as chat's ``reasoning_content`` is (TTFT counts it; the first
  answer text is ``t_first_content_ns``, the reasoning subset ``reasoning_times_ns``).
- ``response.completed`` (or ``response.incomplete``, what a response cut at
  ``max_output_tokens`` ends with, a normal end for a load generator that asks for exactly
  that many): its ``response.usage`` is ``{input_tokens, output_tokens,
  output_tokens_details: {reasoning_tokens}}``; ``output_tokens`` includes the reasoning ones,
  as chat's ``completion_tokens`` does.
- ``error`` (``{"code", "message"}``) or ``response.failed`` (``response.error``): the server
  gave up mid-stream, ``server_error_event`` as chat's in-stream error objects are.

Every other event type (output items, content parts, ``*.done`` events, tool-call arguments) is
skipped: the API adds event types over time and a client must not fail on a new one. There is
no ``[DONE]``: the terminal event is the end, and a stream that closes without one is
``no_done`` whatever ``target.require_done`` says: only the terminal event carries the usage and
the status (completed or incomplete), so an answer without it cannot be told from a cut one. A
``data: [DONE]`` some servers add anyway is skipped.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen import records as R
from loadgen.backends.openai import OpenAIBackend, usage_count
from loadgen.backends.registry import register
from loadgen.backends.stream import SSEResponse, fail

_TEXT = "response.output_text.delta"
_REASONING = frozenset(("response.reasoning_text.delta", "response.reasoning_summary_text.delta"))
_ENDS = frozenset(("response.completed", "response.incomplete"))


class _ResponsesStream(SSEResponse):
    """One streamed response: deltas are chunks, the terminal event carries the usage."""

    __slots__ = ("usage", "ended")

    def __init__(self, rec: R.RequestRecord, keep_texts: bool) -> None:
        super().__init__(rec, keep_texts)
        self.usage: dict[str, Any] | None = None
        self.ended = False

    def on_events(self, t: int, events: list[bytes]) -> bool:
        for data in events:
            if data == b"[DONE]":
                continue
            try:
                obj = orjson.loads(data)
                kind = obj.get("type")
            except (orjson.JSONDecodeError, AttributeError):
                return self.malformed(t, data)
            if not isinstance(kind, str):
                raise TypeError(f"an event without a string type: {kind!r}")
            if kind.endswith(".delta"):
                reasoning = kind in _REASONING
                if not reasoning and kind != _TEXT:
                    continue  # tool-call arguments, audio, ...: not text tokens
                text = obj["delta"]
                if not isinstance(text, str):
                    raise TypeError(f"{kind}'s delta is {type(text).__name__}, not a string")
                if text:
                    self.chunk(t, 1, text, reasoning)
            elif kind == "error":
                return self.error_event(t, data)
            elif kind in _ENDS or kind == "response.failed" or kind == "response.created":
                response = obj["response"]
                if not isinstance(response, dict):
                    raise TypeError(f"{kind}'s response is {type(response).__name__}, not an object")
                if self.rec.response_id is None and isinstance(response.get("id"), str):
                    self.rec.response_id = response["id"]
                if kind == "response.failed":
                    err = response.get("error") or {}
                    msg = err.get("message") if isinstance(err, dict) else err
                    fail(self.rec, R.SERVER_ERROR_EVENT, f"response.failed: {str(msg)[:300]}", t)
                    return False
                if kind in _ENDS:
                    self.ended = True
                    usage = response.get("usage")
                    self.usage = usage if isinstance(usage, dict) else None
        return True

    def on_end(self) -> None:
        rec = self.rec
        if not self.ended:
            fail(rec, R.NO_DONE, "the stream closed without response.completed")
            return
        rec.ok = True
        usage = self.usage
        if usage:
            rec.output_tokens = usage_count(usage, "output_tokens")
            rec.prompt_tokens = usage_count(usage, "input_tokens")
            if rec.output_tokens is not None:
                rec.token_source = "usage"


@register
class ResponsesBackend(OpenAIBackend):
    """One RequestSpec -> one streamed ``/v1/responses`` request -> its RequestRecord. The probe
    and options are chat's (the same servers list their models at ``/v1/models``)."""

    __slots__ = ()
    name = "responses"
    description = "OpenAI Responses API, /v1/responses"
    PATH = "/v1/responses"
    STREAM = _ResponsesStream
    messages = True
    text_only = "the Responses API takes text input, not token ids"

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        o = self.opts
        body: dict[str, Any] = {
            "model": spec.model or o.model,
            "input": spec.messages if spec.messages is not None else spec.prompt,
            "max_output_tokens": spec.output_tokens,
            "stream": True,
        }
        if o.ignore_eos:
            body["ignore_eos"] = True  # vLLM's extra sampling field, as the chat adapter sends it
        if o.extra_body:
            body.update(o.extra_body)
        return body
