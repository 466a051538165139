"""The scripted test server's native protocols, beside its OpenAI endpoints (``server.py``):
Triton's generate extension and SGLang's ``/generate``, each as the engine documents it.

    POST /v2/models/{model}/generate_stream   Triton (TensorRT-LLM ensemble): SSE events
        {"model_name", "model_version", "text_output", ...} with only the new text, no [DONE];
        the response just ends. Errors: HTTP 400 {"error": "..."}, or data: {"error": "..."}.
        With "return_num_output_tokens": true each event also says how many tokens it carries
        (``num_output_tokens``, as Triton's vLLM backend), "return_num_input_tokens" the prompt's.
    GET  /v2, /v2/health/ready, /v2/models/{model}        server and model metadata, readiness
    POST /generate      SGLang: SSE {"text", "output_ids", "meta_info": {"id", "prompt_tokens",
        "completion_tokens", "finish_reason", ...}} then data: [DONE]. ``text`` is cumulative
        (SGLang's default) unless the server or request is scripted ``incremental``.
        Errors: HTTP 400 {"object": "error", "message", ...}, or data: {"error": {"message"}}.
    GET  /get_model_info, /get_server_info, /health

Scripting is the same ``loadgen_test`` object as for the OpenAI endpoints, a top-level field of
the request body (ttft_ms, itl_ms, tokens_per_chunk, fail, fail_every), plus for SGLang
``incremental`` (delta text) and ``holdback_every: k`` (every k-th event advances
completion_tokens without showing text, as a detokenizer holding back half a UTF-8 character
does; its tokens appear with the next event). The ground-truth log records, per event whose
text grew, when it was written and how many tokens it made visible. Requests are matched to the
log by the ``x-request-id`` response header (Triton) or ``meta_info.id`` (SGLang).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loadgen.testing.common import WORDS, Log, end_stream, event, pace_until, reset_connection, scripted

_TRT_FIELDS = {
    "context_logits": 0.0,
    "cum_log_probs": 0.0,
    "generation_logits": 0.0,
    "output_log_probs": 0.0,
    "sequence_end": False,
    "sequence_id": 0,
    "sequence_start": False,
}


class _Triton:
    terminator = b""

    def __init__(self, body: dict, model: str, prompt_tokens: int, cfg: dict) -> None:
        self.model = model
        self.counts = bool(body.get("return_num_output_tokens"))
        self.inputs = prompt_tokens if body.get("return_num_input_tokens") else None

    def event(self, rid: str, new: str, full: str, n: int, sent: int, last: bool) -> bytes:
        obj: dict[str, Any] = dict(_TRT_FIELDS, model_name=self.model, model_version="1", text_output=new)
        if self.counts:
            obj["num_output_tokens"] = n
        if self.inputs is not None:
            obj["num_input_tokens"] = self.inputs
        return event(obj)

    @staticmethod
    def error_event() -> bytes:
        return event({"error": "scripted in-stream error"})

    @staticmethod
    def error_body(code: int) -> dict:
        return {"error": f"scripted HTTP {code}"}


class _SGLang:
    terminator = b"data: [DONE]\n\n"

    def __init__(self, body: dict, model: str, prompt_tokens: int, cfg: dict) -> None:
        self.prompt_tokens = prompt_tokens
        self.incremental = bool(cfg.get("incremental"))
        self.ids: list[int] = []

    def event(self, rid: str, new: str, full: str, n: int, sent: int, last: bool) -> bytes:
        start = len(self.ids)
        self.ids.extend(range(100 + start, 100 + sent))
        meta = {
            "id": rid,
            "finish_reason": {"type": "length", "length": sent} if last else None,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": sent,
            "cached_tokens": 0,
        }
        ids = self.ids[start:] if self.incremental else list(self.ids)
        return event({"text": new if self.incremental else full, "output_ids": ids, "meta_info": meta})

    @staticmethod
    def error_event() -> bytes:
        return event({"error": {"message": "scripted in-stream error"}})

    @staticmethod
    def error_body(code: int) -> dict:
        return {"object": "error", "message": f"scripted HTTP {code}", "type": "Bad Request", "code": code}


async def _play(
    request: Any, proto: Any, cfg: dict, log: Log, rid: str, recv_ns: int, n_out: int, prompt_tokens: int
) -> Any:
    """Stream n_out tokens on the scripted schedule, or fail as scripted."""
    from aiohttp import web

    fail_kind, _, fail_arg = (cfg.get("fail") or "").partition(":")
    fail_n = int(fail_arg) if fail_arg.isdigit() else 0
    if fail_kind == "status":
        code = int(fail_arg or 500)
        return web.json_response(proto.error_body(code), status=code)
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "x-request-id": rid}
    )
    await resp.prepare(request)
    entry = log.open(rid, recv_ns, request, prompt_tokens)

    end = functools.partial(end_stream, resp, entry)

    if fail_kind == "garbage":
        return await end(b"this is not an event stream\n\n")
    tpc = cfg.get("tokens_per_chunk", 1)
    pattern = itertools.cycle(tpc if isinstance(tpc, list) else [tpc])
    hold = int(cfg.get("holdback_every") or 0)
    start, itl_ns = recv_ns + int(cfg["ttft_ms"] * 1e6), int(cfg["itl_ms"] * 1e6)
    sent = shown = k = pending = 0
    full = ""
    while sent < n_out:
        if k == fail_n and await _fault(fail_kind, request, proto, entry, end):
            return resp
        n = min(next(pattern), n_out - sent)
        await pace_until(start + k * itl_ns)
        sent += n
        pending += n
        held = hold and (k + 1) % hold == 0 and sent < n_out
        new = "" if held else "".join(" " + WORDS[j % len(WORDS)] + str(j) for j in range(shown, sent))
        if not held:
            shown = sent
        full += new
        data = proto.event(rid, new, full, n, sent, sent >= n_out)
        t = time.perf_counter_ns()
        await resp.write(data)
        if new:
            entry["chunk_ns"].append(t)
            entry["chunk_tokens"].append(pending)
            pending = 0
            if entry["first_token_ns"] is None:
                entry["first_token_ns"] = t
        k += 1
    return await end(b"" if fail_kind == "no_done" else proto.terminator)


async def _fault(
    kind: str, request: Any, proto: Any, entry: dict, end: Callable[[bytes], Awaitable[Any]]
) -> bool:
    """The script's fault at its event index; True when it ended the stream (a stall never
    returns: the client's timeout or cancel ends it)."""
    if kind == "reset_after":
        reset_connection(request)
        entry["end_ns"] = time.perf_counter_ns()
        return True
    if kind == "stall_after":
        await asyncio.sleep(3600)
        return False
    if kind == "malformed_after":
        await end(b'data: {"text_output": "unterminat\n\n')
        return True
    if kind == "error_event_after":
        await end(proto.error_event() + proto.terminator)
        return True
    return False


def add_routes(app: Any, defaults: dict, log: Log, counter: Any) -> None:
    """Add the Triton and SGLang endpoints to the test server's aiohttp app."""
    _add_triton_routes(app, defaults, log, counter)
    _add_sglang_routes(app, defaults, log, counter)


def _add_triton_routes(app: Any, defaults: dict, log: Log, counter: Any) -> None:
    """Triton's generate extension (one model, the defaults' ``model``) and its metadata."""
    from aiohttp import web

    model = defaults["model"]

    def unknown(name: str) -> Any:
        return web.json_response({"error": f"Request for unknown model: '{name}' is not found"}, status=400)

    async def triton_generate(request: web.Request) -> web.StreamResponse:
        recv_ns = time.perf_counter_ns()
        body = await request.json()
        name = request.match_info["model"]
        if name != model:
            return unknown(name)
        if not isinstance(body.get("text_input"), str):
            return web.json_response({"error": "input 'text_input' is missing"}, status=400)
        cfg, n = scripted(defaults, body, counter)
        n_out = int(body.get("max_tokens") or cfg["default_tokens"])
        prompt_tokens = len(body["text_input"].split())
        proto = _Triton(body, name, prompt_tokens, cfg)
        return await _play(request, proto, cfg, log, f"triton-test-{n}", recv_ns, n_out, prompt_tokens)

    async def ready(request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def server_meta(request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "name": "triton",
                "version": "2.59.0-loadgen-test",
                "extensions": ["classification", "model_repository", "generate"],
            }
        )

    async def model_meta(request: web.Request) -> web.StreamResponse:
        name = request.match_info["model"]
        if name != model:
            return unknown(name)
        return web.json_response(
            {
                "name": name,
                "versions": ["1"],
                "platform": "ensemble",
                "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [-1, 1]}],
                "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1, -1]}],
            }
        )

    app.router.add_post("/v2/models/{model}/generate_stream", triton_generate)
    app.router.add_post("/v2/models/{model}/versions/{version}/generate_stream", triton_generate)
    app.router.add_get("/v2", server_meta)
    app.router.add_get("/v2/health/ready", ready)
    app.router.add_get("/v2/models/{model}", model_meta)


def _add_sglang_routes(app: Any, defaults: dict, log: Log, counter: Any) -> None:
    """SGLang's native ``/generate`` (text or token ids) and its model and server info."""
    from aiohttp import web

    model = defaults["model"]

    async def sglang_generate(request: web.Request) -> web.StreamResponse:
        recv_ns = time.perf_counter_ns()
        body = await request.json()
        text, ids = body.get("text"), body.get("input_ids")
        if (text is None) == (ids is None):
            return web.json_response(
                _SGLang.error_body(400) | {"message": "give either text or input_ids"}, status=400
            )
        cfg, n = scripted(defaults, body, counter)
        sp = body.get("sampling_params") or {}
        n_out = int(sp.get("max_new_tokens") or cfg["default_tokens"])
        prompt_tokens = len(ids) if ids is not None else len(text.split())
        proto = _SGLang(body, model, prompt_tokens, cfg)
        return await _play(request, proto, cfg, log, f"sglang-test-{n}", recv_ns, n_out, prompt_tokens)

    async def model_info(request: web.Request) -> web.StreamResponse:
        return web.json_response({"model_path": model, "tokenizer_path": model, "is_generation": True})

    async def server_info(request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "version": "0.5.0-loadgen-test",
                "stream_interval": 1,
                "incremental_streaming_output": bool(defaults.get("incremental")),
            }
        )

    app.router.add_post("/generate", sglang_generate)
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/get_server_info", server_info)
