"""Triton Inference Server's generate extension: ``POST /v2/models/{model}/generate_stream``.

The protocol, as Triton documents it (server ``docs/protocol/extension_generate.md``) and the
TensorRT-LLM backend's ``ensemble`` / ``tensorrt_llm_bls`` models serve it:

- Request: one JSON object, ``{"text_input": ..., "max_tokens": N, "stream": true,
  "bad_words": "", "stop_words": ""}``; every other top-level key becomes an input tensor or a
  parameter of the model. ``ignore_eos`` is sent as ``min_length: N`` (the ensemble's input
  that forbids an end before N tokens; vLLM's and GenAI-Perf's TRT-LLM clients do the same).
  Text only: the generate extension has no token-id input.
- Response: Server-Sent Events, one ``data: {"model_name", "model_version", "text_output",
  ...}`` per response the model sends (the TRT-LLM backend in decoupled mode: one per decoding
  step, its newly decoded text). No ``[DONE]``: the stream ends when the HTTP response does,
  and that is a normal end. An error before inference is an HTTP status (typically 400) with
  ``{"error": "..."}``; one during inference is a ``data: {"error": "..."}`` event under 200.

What loadgen measures from it: a token-bearing event is one with non-empty ``text_output``.
Each counts as one token unless the event carries ``num_output_tokens`` (Triton's vLLM
backend with ``return_num_output_tokens``, and TRT-LLM models configured to return it): that
count of tokens in this response is used instead (``token_source: continuous_usage``). A
TRT-LLM engine can put several tokens in one response (speculative decoding, a
``stream_interval``-like batching in a BLS model); without a count they are then undercounted,
and a tokenizer (``--tokenizer``) is the remedy. There is no usage block: prompt tokens are the
workload's target (``prompt_tokens_source: target``) unless ``num_input_tokens`` is returned.
BLS models configured with ``accumulate_tokens`` send the whole text so far in each event; that
mode is not what this adapter expects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson

from loadgen import records as R
from loadgen.backends.base import (
    BackendOptions,
    ProbeError,
    ProbeResult,
    StreamingBackend,
    get_json,
    merge_extra,
    server_headers,
    unreachable,
)
from loadgen.backends.identity import ServerIdentity, header, version_of
from loadgen.backends.registry import register
from loadgen.backends.stream import SSEResponse
from loadgen.backends.transports.base import Transport
from loadgen.redact import redact_url

TritonOptions = BackendOptions  # model, ignore_eos, extra_body, timeout_s: nothing of its own


def generate_fields(spec: R.RequestSpec, opts: BackendOptions) -> dict[str, Any]:
    """A Triton generate request's fields: the one list both Triton protocols send, the HTTP
    generate extension as its JSON body, gRPC's ``ModelStreamInfer`` as one input tensor each
    (``triton_grpc.py``). ``ignore_eos`` is ``min_length: max_tokens``; ``target.extra_body``
    adds fields or removes one (null)."""
    n = spec.output_tokens
    body: dict[str, Any] = {
        "text_input": spec.prompt,
        "max_tokens": n,
        "stream": True,
        "bad_words": "",
        "stop_words": "",
    }
    if opts.ignore_eos:
        body["min_length"] = n
    return merge_extra(body, opts.extra_body)


def take_response(stream: SSEResponse, t: int, text: str, n_out: int | None, n_in: int | None) -> bool:
    """One Triton response's outputs, counted the same way whatever carried them: a response
    with non-empty ``text_output`` is one token-bearing chunk of one token, or of ``n_out``
    (``num_output_tokens``) when the model returns it; ``n_in`` (``num_input_tokens``) is the
    prompt's count. True when the response carried its own token count."""
    if n_in is not None:
        stream.rec.prompt_tokens = n_in
    if not text:
        return False  # an empty (often the final, flags-only) response: not a token
    if n_out is None:
        stream.chunk(t, 1, text)
        return False
    stream.chunk(t, max(1, n_out), text)
    return True


class _TritonStream(SSEResponse):
    """Events carry the newly decoded text; the stream ends with the response."""

    __slots__ = ("continuous",)
    end_kind = R.END_OF_BODY  # the generate extension has no end marker

    def __init__(self, rec: R.RequestRecord, keep_texts: bool) -> None:
        super().__init__(rec, keep_texts)
        self.continuous = False

    def on_events(self, t: int, events: list[bytes]) -> bool:
        rec = self.rec
        for data in events:
            try:
                obj = orjson.loads(data)
                text = obj.get("text_output")
            except (orjson.JSONDecodeError, AttributeError):
                return self.malformed(t, data)
            if "error" in obj:
                return self.error_event(t, data)
            if rec.response_id is None:
                rec.response_id = obj.get("id") or self.rid
            if isinstance(text, list):  # a batch-shaped output tensor: [["..."]] or ["..."]
                text = "".join(str(x[0] if isinstance(x, list) and x else x) for x in text)
            n_out, n_in = _scalar(obj.get("num_output_tokens")), _scalar(obj.get("num_input_tokens"))
            if take_response(self, t, text or "", n_out, n_in):
                self.continuous = True
        return True

    def on_end(self) -> None:
        rec = self.rec
        rec.ok = True  # no terminator in this protocol: a complete response is a normal end
        if self.continuous:
            rec.token_source = "continuous_usage"


@register
class TritonBackend(StreamingBackend):
    """One RequestSpec -> one ``generate_stream`` request -> its RequestRecord."""

    __slots__ = ()
    name = "triton_generate"
    description = "Triton's generate extension, /v2/models/{model}/generate_stream"
    PATH = "/v2/models/{model}/generate_stream"
    STREAM = _TritonStream
    text_only = "Triton's generate extension only takes text_input"
    needs_model = True
    engine = "triton"
    SOURCES = (("version", "/v2"), ("model_metadata", "/v2/models/{name}"))

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        return generate_fields(spec, self.opts)

    @classmethod
    async def probe(cls, transport: Transport, url: str, model: str | None) -> ProbeResult:
        """``/v2/health/ready``, the server's metadata (``/v2``: name, version, extensions) and
        the model's (``/v2/models/{model}``). Triton serves many models and lists none under an
        OpenAI path, so the model must be named."""
        where = redact_url(url)
        if not model:
            raise ProbeError(
                f"target.endpoint {cls.name} needs target.model (--model NAME): the "
                "Triton model to call, e.g. `ensemble` or `tensorrt_llm_bls` for the "
                "TensorRT-LLM backend"
            )
        info: dict[str, Any] = {"protocol": cls.name}
        try:
            status, headers, _ = await get_json(transport, "/v2/health/ready")
        except Exception as exc:  # noqa: BLE001 - any failure here means "cannot reach it"
            raise unreachable(transport, url, "/v2/health/ready", exc) from None
        info["ready_status"] = status
        info["headers"] = server_headers(headers)
        if status != 200:
            raise ProbeError(
                f"{where}/v2/health/ready answered HTTP {status}: the Triton server "
                f"is not ready (still loading models?)"
            )
        with contextlib.suppress(Exception):
            st, _h, server_meta = await get_json(transport, "/v2", timeout_s=5.0)
            if st == 200 and isinstance(server_meta, dict):
                info["version"] = server_meta  # {"name": "triton", "version": ..., "extensions": [...]}
        path = f"/v2/models/{quote(model, safe='')}"
        try:
            st, _h, model_meta = await get_json(transport, path)
        except Exception as exc:  # noqa: BLE001
            raise unreachable(transport, url, path, exc) from None
        if st != 200:
            why = (model_meta or {}).get("error") if isinstance(model_meta, dict) else None
            raise ProbeError(
                f"{where}{path} answered HTTP {st}"
                f"{f' ({why})' if why else ''}: Triton has no ready model {model!r}; "
                f"set target.model to one it serves"
            )
        info["model_metadata"] = model_meta
        return ProbeResult(info, model, cls.identify(info))

    @classmethod
    def identify(cls, info: Mapping[str, Any]) -> ServerIdentity:
        """Triton lists no model under an OpenAI path: the served model is its metadata's name."""
        meta = info.get("model_metadata")
        return ServerIdentity(
            engine=cls.engine,
            version=version_of(info.get("version")),
            served_model=meta.get("name") if isinstance(meta, Mapping) else None,
            server_header=header(info),
        )


def _scalar(v: object) -> int | None:
    """An integer output tensor as JSON: ``3`` or ``[3]``."""
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    return v if isinstance(v, int) and not isinstance(v, bool) else None
