"""SGLang's native streaming endpoint: ``POST /generate``.

The protocol, as SGLang serves it (``python/sglang/srt/entrypoints/http_server.py``,
``generate_request``; the request is ``io_struct.GenerateReqInput``):

- Request: ``{"text": ...}`` or ``{"input_ids": [...]}`` (token-id prompts, exact lengths),
  ``"sampling_params": {"max_new_tokens": N, "ignore_eos": true}``, ``"stream": true``.
- Response: Server-Sent Events ``data: {"text", "output_ids", "meta_info": {"id",
  "prompt_tokens", "completion_tokens", "finish_reason", ...}}``, then ``data: [DONE]``. By
  default ``text`` (and ``output_ids``) is CUMULATIVE: the whole output so far, every event.
  Servers started with ``--incremental-streaming-output`` (``--stream-output`` in older
  releases) send only what is new. A failure during generation is ``data: {"error":
  {"message": ...}}`` followed by ``[DONE]``; a bad request is an HTTP 400 before any event.

What loadgen measures from it: a token-bearing event is one whose text grew. Both text modes
are handled: the first events decide which one the server speaks (an event whose text does not
extend the text so far can only be a delta). Tokens per event come from ``meta_info``'s
cumulative ``completion_tokens``, exactly: an event carries the tokens counted since the last
token-bearing event, so a token whose text the detokenizer held back (an incomplete UTF-8
character) is counted with the event that shows it (``token_source: continuous_usage``, as for
vLLM's per-chunk usage). Output and prompt tokens are the last ``meta_info``'s; the response id
is ``meta_info.id``. A stream that closes without ``[DONE]`` is whole when its last
``meta_info`` has a ``finish_reason`` (ok, ``stream_end: no_terminator``); without one it is
``no_done``, as is every stream without ``[DONE]`` under ``target.require_done``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import orjson

from loadgen import records as R
from loadgen.backends.base import (
    ProbeError,
    ProbeResult,
    StreamingBackend,
    get_json,
    merge_extra,
    server_headers,
    unreachable,
)
from loadgen.backends.registry import register
from loadgen.backends.stream import SSEResponse
from loadgen.backends.transports.base import Transport
from loadgen.redact import redact_url

# What /get_server_info says that changes what a client sees; the rest is not kept.
_SERVER_INFO_KEYS = (
    "version",
    "incremental_streaming_output",
    "stream_output",
    "stream_interval",
    "tp_size",
    "dp_size",
    "max_running_requests",
    "chunked_prefill_size",
    "speculative_algorithm",
    "context_length",
    "max_total_num_tokens",
)


class _SGLangStream(SSEResponse):
    """Events carry the text so far (or, incremental servers, the new text) and meta_info."""

    __slots__ = ("acc", "mode", "counted", "meta")
    requires_done = True

    def __init__(self, rec: R.RequestRecord, keep_texts: bool) -> None:
        super().__init__(rec)
        self.texts: list[str] | None = [] if keep_texts else None
        self.acc = ""  # the output text so far, as reconstructed
        self.mode: str | None = None  # "cumulative" | "incremental", once an event tells
        self.counted = 0  # completion_tokens already given to token-bearing events
        self.meta: dict | None = None  # the last meta_info seen

    def on_events(self, t: int, events: list[bytes]) -> bool:
        rec = self.rec
        for data in events:
            try:
                obj = orjson.loads(data)
                text = obj.get("text")
            except (orjson.JSONDecodeError, AttributeError):
                return self.malformed(t, data)
            if "error" in obj:
                return self.error_event(t, data)
            meta = obj.get("meta_info")
            if isinstance(meta, dict):
                self.meta = meta
                if rec.response_id is None:
                    rec.response_id = meta.get("id") or self.rid
            new = self._new_text(text if isinstance(text, str) else "")
            if not new:
                continue  # nothing new to show: its tokens, if any, go with the next event
            completion = meta.get("completion_tokens") if isinstance(meta, dict) else None
            if isinstance(completion, int):
                n = max(1, completion - self.counted)
                self.counted = max(self.counted, completion)
            else:
                n = 1
            self.chunk(t, n, new)
        return True

    def _new_text(self, text: str) -> str:
        """The part of this event's text not seen before, in whichever mode the server streams."""
        acc = self.acc
        if self.mode == "incremental" or not acc:
            self.acc = acc + text
            return text
        if text.startswith(acc):
            # Cumulative, or (rarely) a delta that happens to repeat the whole text so far; the
            # two agree on whether the event is token-bearing, and the second one seen decides.
            if len(text) > len(acc) and self.mode is None:
                self.mode = "cumulative"
            self.acc = text
            return text[len(acc) :]
        self.mode = "incremental"  # a cumulative text can never stop extending the last one
        self.acc = acc + text
        return text

    def finished(self) -> str:
        if not (self.meta or {}).get("finish_reason"):
            return "its last meta_info has no finish_reason"
        return ""

    def on_end(self) -> None:
        rec = self.rec
        rec.ok = True
        meta = self.meta or {}
        finish = meta.get("finish_reason")
        if isinstance(finish, dict) and isinstance(finish.get("type"), str):
            rec.finish_reason = finish["type"]  # {"type": "length", "length": 128}
        elif isinstance(finish, str):
            rec.finish_reason = finish
        completion, prompt = meta.get("completion_tokens"), meta.get("prompt_tokens")
        if isinstance(completion, int):
            rec.output_tokens = completion
            rec.token_source = "continuous_usage"
        if isinstance(prompt, int):
            rec.prompt_tokens = prompt


@register
class SGLangBackend(StreamingBackend):
    """One RequestSpec -> one streamed ``/generate`` request -> its RequestRecord."""

    __slots__ = ()
    name = "sglang_generate"
    description = "SGLang's native /generate"
    PATH = "/generate"
    STREAM = _SGLangStream
    token_ids = True
    engine = "sglang"
    SOURCES = (
        ("version", "/version"),
        ("models", "/v1/models"),
        ("model_info", "/get_model_info"),
        ("server_info", "/get_server_info"),
    )

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        sampling: dict[str, Any] = {"max_new_tokens": spec.output_tokens}
        if self.opts.ignore_eos:
            sampling["ignore_eos"] = True
        prompt_key = "text" if isinstance(spec.prompt, str) else "input_ids"
        body: dict[str, Any] = {prompt_key: spec.prompt, "sampling_params": sampling, "stream": True}
        extra = dict(self.opts.extra_body or {})
        if isinstance(extra.get("sampling_params"), Mapping):
            # Merged into the defaults, not over them: `temperature: 0` must keep max_new_tokens.
            merge_extra(sampling, extra.pop("sampling_params"))
        return merge_extra(body, extra)

    @classmethod
    async def probe(cls, transport: Transport, url: str, model: str | None) -> ProbeResult:
        """``/get_model_info`` (the model path, used as the model name when none is given),
        ``/health``, a few fields of ``/get_server_info`` (version, streaming mode) and the
        OpenAI ``/v1/models`` listing SGLang also serves (its max_model_len)."""
        where = redact_url(url)
        info: dict[str, Any] = {"protocol": cls.name}
        try:
            status, headers, model_info = await get_json(transport, "/get_model_info")
        except Exception as exc:  # noqa: BLE001 - any failure here means "cannot reach it"
            raise unreachable(transport, url, "/get_model_info", exc) from None
        info["headers"] = server_headers(headers)
        info["model_info"] = model_info if status == 200 and isinstance(model_info, dict) else None
        with contextlib.suppress(Exception):
            st, _h, _b = await get_json(transport, "/health", timeout_s=10.0)
            info["health_status"] = st
        if info.get("health_status") not in (None, 200):
            raise ProbeError(
                f"{where}/health answered HTTP {info['health_status']}: the SGLang "
                f"server is not healthy (still starting?)"
            )
        with contextlib.suppress(Exception):
            st, _h, server_info = await get_json(transport, "/get_server_info", timeout_s=5.0)
            if st == 200 and isinstance(server_info, dict):
                kept = {k: server_info[k] for k in _SERVER_INFO_KEYS if k in server_info}
                info["server_info"] = kept
                if "version" in kept:
                    info["version"] = {"version": kept["version"]}
        with contextlib.suppress(Exception):  # SGLang also serves the OpenAI listing (max_model_len)
            st, _h, models = await get_json(transport, "/v1/models", timeout_s=5.0)
            info["models_status"] = st
            info["models"] = models if st == 200 and isinstance(models, dict) else None
        if not model:
            model = (info["model_info"] or {}).get("model_path")
            if not model:
                raise ProbeError(
                    f"{where}/get_model_info gave no model_path (HTTP {status}); is this "
                    f"an SGLang server? Set target.model (--model NAME) to name the run's model"
                )
        return ProbeResult(info, str(model), cls.identify(info))
