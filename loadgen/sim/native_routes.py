"""The simulator's routes for two engines' native protocols, off the same engine as its OpenAI
paths: each request is read as the completions request of the same prompt and limits
(``native_sse.as_completion``), then served, paced and logged by ``SimServer.serve``.

    Triton's generate extension (TensorRT-LLM's ensemble shape; ``native_sse.py`` has the events)
    POST /v2/models/{model}[/versions/{v}]/generate_stream   SSE, one event per decoding step
    POST /v2/models/{model}[/versions/{v}]/generate          one JSON answer
    GET  /v2 (server metadata), /v2/health/ready, /v2/health/live,
         /v2/models/{model} (model metadata), /v2/models/{model}/ready
    Served models: the preset's name (``served_model_name``) and TensorRT-LLM's ``ensemble`` and
    ``tensorrt_llm_bls``; any other name is HTTP 400 ``Request for unknown model``, as Triton
    answers (the OpenAI paths refuse unknown names too). A bad body is HTTP 400 ``{"error"}``.

    SGLang's native API
    POST /generate          ``text`` or ``input_ids``, ``sampling_params`` (``max_new_tokens``,
                            default 128 as SGLang's; ``min_new_tokens``; ``ignore_eos``);
                            ``stream: true``: SSE, then ``[DONE]``; else one JSON answer
    GET  /get_model_info, /get_server_info (and /health, served beside the OpenAI paths)
    A bad body is HTTP 400 ``{"error": {"message"}}``: the shape SGLang gives a non-streamed
    request (a streamed one gets it as an event under 200 from SGLang itself).

The ground-truth log names the endpoint (``triton_generate``, ``sglang_generate``); response
ids are ``triton-sim-N`` (the ``x-request-id`` header) and ``sglang-sim-N`` (also
``meta_info.id``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from aiohttp import web

from .config import SimConfig
from .native_sse import NativeRequestError, SGLangEncoder, TritonEncoder, as_completion
from .requests import BadRequest, RequestState, parse_request

now_ns = time.perf_counter_ns
TRITON = "triton_generate"
SGLANG = "sglang_generate"
TRITON_MODELS = ("ensemble", "tensorrt_llm_bls")  # TensorRT-LLM's model repository names


class Serving(Protocol):
    """What a protocol's handler needs of the server (``SimServer``)."""

    config: SimConfig
    created: int  # the server's start, in unix seconds

    def new_id(self, prefix: str) -> str: ...

    async def serve(self, request: web.Request, st: RequestState) -> web.StreamResponse: ...


def parse_native(
    body: Any,
    endpoint: str,
    model: str,
    config: SimConfig,
    rid: str,
    created: int,
    stream: bool | None = None,
) -> RequestState:
    """A Triton or SGLang body as the completions request of the same prompt and limits (so its
    prompt count and words are completions'), answered by its own protocol's encoder.
    ``stream``: what the path says (Triton's generate_stream or generate); None: the body's."""
    try:
        completion = as_completion(body, endpoint)
    except NativeRequestError as e:
        raise BadRequest(str(e)) from None
    if stream is not None:
        completion["stream"] = stream
    state = parse_request(completion, False, config, rid, created)
    state.endpoint, state.model = endpoint, model
    if endpoint == TRITON:
        counts, inputs = bool(body.get("return_num_output_tokens")), bool(body.get("return_num_input_tokens"))
        state.encoder = TritonEncoder(model, state.prompt_tokens, counts, inputs)
    else:
        state.encoder = SGLangEncoder(
            rid, state.prompt_tokens, config.incremental_streaming_output, _cached_tokens(state)
        )
    return state


def _cached_tokens(state: RequestState) -> Callable[[], int]:
    return lambda: state.seq.cached_tokens if state.seq is not None else 0


def native_routes(server: Serving, version: str) -> list[web.RouteDef]:
    """The routes of both protocols, bound to ``server``."""
    h = _Handlers(server, version)
    base = "/v2/models/{model}"
    routes = [
        web.get("/v2", h.triton_server),
        web.get("/v2/health/ready", h.ok),
        web.get("/v2/health/live", h.ok),
        web.get(base, h.triton_model),
        web.get(base + "/ready", h.triton_model_ready),
        web.post("/generate", h.sglang_generate),
        web.get("/get_model_info", h.sglang_model_info),
        web.get("/get_server_info", h.sglang_server_info),
    ]
    for prefix in (base, base + "/versions/{version}"):
        routes.append(web.post(prefix + "/generate_stream", h.triton_stream))
        routes.append(web.post(prefix + "/generate", h.triton_generate))
    return routes


class _Handlers:
    __slots__ = ("server", "version")

    def __init__(self, server: Serving, version: str) -> None:
        self.server, self.version = server, version

    # --- Triton --------------------------------------------------------------------------------
    def _triton_model(self, request: web.Request) -> tuple[str, web.Response | None]:
        """The path's model, and the 400 Triton answers when it serves no such model."""
        name = request.match_info["model"]
        if name in (self.server.config.served_model_name, *TRITON_MODELS):
            return name, None
        return name, _json({"error": f"Request for unknown model: '{name}' is not found"}, 400)

    async def triton_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._triton(request, stream=True)

    async def triton_generate(self, request: web.Request) -> web.StreamResponse:
        return await self._triton(request, stream=False)

    async def _triton(self, request: web.Request, stream: bool) -> web.StreamResponse:
        arrival = now_ns()
        rid = self.server.new_id("triton")
        name, unknown = self._triton_model(request)
        if unknown is not None:
            return unknown
        try:
            body = orjson.loads(await request.read())
            st = parse_native(body, TRITON, name, self.server.config, rid, self.server.created, stream)
        except orjson.JSONDecodeError as e:
            return _json({"error": f"failed to parse the request JSON buffer: {e}"}, 400, rid)
        except BadRequest as e:
            return _json({"error": e.message}, 400, rid)
        st.arrival_ns = arrival
        return await self.server.serve(request, st)

    async def ok(self, request: web.Request) -> web.Response:
        return web.Response(status=200)  # serving as soon as the server is

    async def triton_server(self, request: web.Request) -> web.Response:
        return _json({"name": "loadgen-sim", "version": self.version, "extensions": ["generate"]})

    async def triton_model(self, request: web.Request) -> web.Response:
        name, unknown = self._triton_model(request)
        if unknown is not None:
            return unknown
        tensor = {"datatype": "INT32", "shape": [-1, 1]}
        return _json(
            {
                "name": name,
                "versions": ["1"],
                "platform": "ensemble" if name == "ensemble" else "python",
                "inputs": [
                    {"name": "text_input", "datatype": "BYTES", "shape": [-1, 1]},
                    {"name": "max_tokens", **tensor},
                    {"name": "min_length", **tensor},
                ],
                "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1, -1]}],
            }
        )

    async def triton_model_ready(self, request: web.Request) -> web.Response:
        _name, unknown = self._triton_model(request)
        return unknown or web.Response(status=200)

    # --- SGLang --------------------------------------------------------------------------------
    async def sglang_generate(self, request: web.Request) -> web.StreamResponse:
        arrival = now_ns()
        rid = self.server.new_id("sglang")
        config = self.server.config
        try:
            body = orjson.loads(await request.read())
            st = parse_native(body, SGLANG, config.served_model_name, config, rid, self.server.created)
        except orjson.JSONDecodeError as e:
            return _json({"error": {"message": f"request body is not valid JSON: {e}"}}, 400, rid)
        except BadRequest as e:
            return _json({"error": {"message": e.message}}, 400, rid)
        st.arrival_ns = arrival
        return await self.server.serve(request, st)

    async def sglang_model_info(self, request: web.Request) -> web.Response:
        name = self.server.config.served_model_name
        return _json({"model_path": name, "tokenizer_path": name, "is_generation": True})

    async def sglang_server_info(self, request: web.Request) -> web.Response:
        """A few of SGLang's server arguments, as the simulator's config sets them."""
        c = self.server.config
        incremental = c.incremental_streaming_output
        return _json(
            {
                "version": self.version,
                "model_path": c.served_model_name,
                "context_length": c.context_len,
                "max_total_num_tokens": c.num_blocks * c.block_size,
                "max_running_requests": c.max_num_seqs,
                "chunked_prefill_size": c.max_num_batched_tokens,
                "page_size": c.block_size,
                "tp_size": c.tensor_parallel_size,
                "dp_size": 1,
                "stream_interval": 1,
                "incremental_streaming_output": incremental,
                "stream_output": incremental,  # the same flag's older name
                "disable_radix_cache": not c.prefix_caching,
                "speculative_algorithm": None,
            }
        )


def _json(obj: Any, status: int = 200, rid: str = "") -> web.Response:
    headers = {"x-request-id": rid} if rid else None
    return web.Response(
        body=orjson.dumps(obj), status=status, content_type="application/json", headers=headers
    )
