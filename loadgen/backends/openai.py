"""OpenAI-compatible streaming: chat completions and completions, as every engine serves them.

Hot path, per read: stamp the clock, split SSE, and per event parse one small JSON object and
look at three keys. Nothing else happens until the stream ends (token counting with a
tokenizer, usage bookkeeping), so a busy client adds as little as possible to what it measures.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen import records as R
from loadgen.backends.base import (
    BackendOptions,
    ProbeError,
    ProbeResult,
    StreamingBackend,
    TargetLike,
    get_json,
    server_headers,
    unreachable,
)
from loadgen.backends.media_parts import with_media
from loadgen.backends.registry import register
from loadgen.backends.stream import Live, SSEResponse
from loadgen.backends.tool_calls import ToolCalls
from loadgen.backends.transports.base import Transport
from loadgen.redact import redact_url

__all__ = ["ChatBackend", "CompletionsBackend", "Live", "OpenAIBackend", "OpenAIOptions", "usage_count"]


@dataclass(frozen=True, slots=True)
class OpenAIOptions(BackendOptions):
    include_usage: bool = True
    continuous_usage_stats: bool = False


class OpenAIBackend(StreamingBackend):
    """What chat and completions share: the options, the probe, the body but for the prompt."""

    opts: OpenAIOptions
    __slots__ = ()
    server_tokenize = True
    model_mix = True  # every body names its model: a LoRA mix picks it per request

    @classmethod
    def options(cls, target: TargetLike, model: str) -> OpenAIOptions:
        return OpenAIOptions(
            model=model,
            ignore_eos=target.ignore_eos is not False,
            include_usage=target.include_usage,
            continuous_usage_stats=target.continuous_usage_stats,
            extra_body=target.extra_body,
            timeout_s=target.timeout_s,
            require_done=target.require_done,
        )

    def prime(self, stream: SSEResponse) -> None:
        super().prime(stream)
        if isinstance(stream, _Stream):
            stream.want_usage = self.opts.include_usage or self.opts.continuous_usage_stats

    @classmethod
    async def probe(cls, transport: Transport, url: str, model: str | None) -> ProbeResult:
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
        heard = cls.identify(info)
        if "llama.cpp" in (heard.engine, heard.server_header):  # its listing or its Server header
            with contextlib.suppress(Exception):
                info["props"] = await llamacpp_props(transport)
        if not model:
            data = (info["models"] or {}).get("data") or []
            if not data:
                raise ProbeError(
                    f"{redact_url(url)}/v1/models lists no model "
                    f"(HTTP {status}); set target.model (--model NAME)"
                )
            model = str(data[0]["id"])
        return ProbeResult(info, model, cls.identify(info))

    SOURCES = (("version", "/version"), ("models", "/v1/models"), ("props", "/props"))

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        o = self.opts
        body: dict[str, Any] = {
            "model": spec.model or o.model,
            "max_tokens": spec.output_tokens,
            "stream": True,
        }
        if self.messages:
            body["messages"] = spec.messages
        else:
            body["prompt"] = spec.prompt
        if spec.tools is not None:
            body["tools"] = spec.tools
            body["tool_choice"] = spec.tool_choice
        if spec.response_format is not None:
            body["response_format"] = spec.response_format
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


class _Stream(SSEResponse):
    """Push-style consumer of one response: the transport calls ``head`` then ``feed`` per read
    (with the read's arrival time); ``finish`` when the body is complete (see SSEResponse)."""

    __slots__ = ("usage", "prev_completion", "continuous", "timings", "tools", "want_usage")
    requires_done = True
    chat: bool  # a chat delta (``choices[0].delta``) or a completions choice (``.text``)

    def __init__(self, rec: R.RequestRecord, keep_texts: bool) -> None:
        super().__init__(rec, keep_texts)
        self.usage: dict[str, Any] | None = None
        self.timings: Any = None
        self.prev_completion = 0
        self.continuous = False
        self.tools: ToolCalls | None = None  # made at a chat answer's first tool_calls piece
        self.want_usage = False  # the request asked for the usage chunk (stream_options)

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
                rid = obj.get("id")
                rec.response_id = rid if isinstance(rid, str) and rid else self.rid
            u = obj.get("usage")
            if u:
                self.usage = u  # the last one seen is the total (final chunk or continuous)
            if "timings" in obj:  # llama.cpp: what the server spent on this request, in ms
                self.timings = obj["timings"]
            if choices:
                c = choices[0]
                finish = c.get("finish_reason")
                if finish is not None:
                    if not isinstance(finish, str):
                        raise TypeError(f"finish_reason is {type(finish).__name__}, not a string")
                    rec.finish_reason = finish
                reasoning: Any = None
                if chat:
                    d = c.get("delta") or {}
                    calls = d.get("tool_calls")
                    if calls:
                        if self.tools is None:
                            self.tools = ToolCalls()
                        piece = self.tools.feed(calls)
                        if piece:
                            self.chunk(t, self._tokens(u), piece, tool=True)
                    text = d.get("content")
                    if not text:
                        reasoning = d.get("reasoning_content") or d.get("reasoning")
                        if not reasoning:
                            continue  # role-only, empty or tool-call delta: no text token
                else:
                    text = c.get("text")
                    if not text:
                        continue
                if not isinstance(text or reasoning, str):
                    raise TypeError(f"the token text is {type(text or reasoning).__name__}, not a string")
                self.chunk(t, self._tokens(u), text or reasoning, reasoning is not None)
            elif "error" in obj or obj.get("object") == "error":
                # {"error": {...}} mid-stream, or older vLLM's top-level {"object": "error", ...}
                return self.error_event(t, data)
        return True

    def _tokens(self, u: Any) -> int:
        """Tokens one token-bearing event carried: 1, or with continuous_usage_stats what the
        cumulative count grew by (speculative decoding, merged steps)."""
        if not (u and "completion_tokens" in u):
            return 1
        n = u["completion_tokens"] - self.prev_completion
        self.prev_completion = u["completion_tokens"]
        self.continuous = True
        return max(n, 1)

    def unfinished(self) -> str:
        return self.tools.open_call() if self.tools is not None else ""

    def finished(self) -> str:
        """A stream without ``[DONE]`` is whole once a ``finish_reason`` came and, when the
        request asked for it, the usage chunk (which servers send after the finish): Hugging
        Face's ``transformers serve`` ends its streams so."""
        if self.rec.finish_reason is None:
            return "it closed before any finish_reason"
        if self.want_usage and self.usage is None:
            return "it closed after the finish_reason, before the usage chunk that was asked for"
        return ""

    def on_end(self) -> None:
        rec = self.rec
        rec.ok = True
        if self.tools is not None:
            rec.tool_calls = len(self.tools)
            rec.tool_names = self.tools.names()
            if rec.answer is not None:  # read: a next round sends the calls back
                rec.tool_call_args = self.tools.detail()
        tm = self.timings
        if isinstance(tm, dict):
            rec.server_prompt_ms = _ms(tm.get("prompt_ms"))
            rec.server_predicted_ms = _ms(tm.get("predicted_ms"))
            n = tm.get("predicted_n")
            rec.server_predicted_tokens = n if isinstance(n, int) and not isinstance(n, bool) else None
        usage = self.usage
        if usage:
            rec.output_tokens = usage_count(usage, "completion_tokens")
            rec.prompt_tokens = usage_count(usage, "prompt_tokens")
        if self.continuous:
            rec.token_source = "continuous_usage"
        elif usage and rec.output_tokens is not None:
            rec.token_source = "usage"


class _ChatStream(_Stream):
    __slots__ = ()
    chat = True


class _CompletionsStream(_Stream):
    __slots__ = ()
    chat = False


@register
class ChatBackend(OpenAIBackend):
    __slots__ = ()
    name = "chat"
    description = "OpenAI-compatible /v1/chat/completions"
    PATH = "/v1/chat/completions"
    STREAM = _ChatStream
    messages = True
    tool_use = True
    text_only = "the chat endpoint only takes text messages"
    media = True  # images and audio as content parts of the user message

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        body = super().body(spec)
        if spec.media and spec.messages is not None:
            body["messages"] = with_media(spec.messages, spec.media)
        return body


@register
class CompletionsBackend(OpenAIBackend):
    __slots__ = ()
    name = "completions"
    description = "OpenAI-compatible /v1/completions"
    PATH = "/v1/completions"
    STREAM = _CompletionsStream
    token_ids = True


async def llamacpp_props(transport: Transport) -> dict[str, Any] | None:
    """What llama-server's ``/props`` says of its capacity: the per-slot context (``-c`` over
    ``-np``: the longest prompt plus max_tokens one request may ask), the slots, the build and
    the model file; None when it does not answer."""
    status, _h, body = await get_json(transport, "/props", timeout_s=5.0)
    if status != 200 or not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return {
        "n_ctx_slot": n_ctx,
        "total_slots": body.get("total_slots"),
        "build_info": body.get("build_info"),
        "model_path": body.get("model_path"),
    }


def _ms(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def usage_count(usage: dict[str, Any], key: str) -> int | None:
    """A usage count: absent is None; present, it must be a non-negative integer (a null or a
    string there is a malformed stream, not a missing count)."""
    if key not in usage:
        return None
    v = usage[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise TypeError(f"usage.{key} is {v!r}, not a count")
    return v
