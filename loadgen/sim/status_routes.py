"""The simulator's routes beside its protocols: what a client, a scraper or a test asks of the
server rather than of the model.

    GET  /health, /v1/models (the preset's model and its LoRA adapters), /version
    GET  /metrics            vLLM's metric names, from the engine (metrics.py)
    GET  /dcgm/metrics       a DCGM exporter's metrics of its simulated GPUs (gpu.py)
    GET  /sim/info           the configuration as served; /sim/gpu: the GPUs' ground truth
    GET  /sim/ground_truth   the ground-truth log so far
    POST /reset_prefix_cache (vLLM's name), POST or GET /flush_cache (SGLang's): flush the
         prefix cache, counted in /metrics (``loadgen_sim_cache_resets_total``) so a client's
         reset hook can be checked from this side
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from .gpu import PATH as DCGM_PATH
from .sse import error_body

_PROMETHEUS = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), content_type="application/json")


def status_routes(server: Any, version: str) -> list[web.RouteDef]:
    """The routes of ``server`` (a ``SimServer``) beside its protocols."""

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(request: web.Request) -> web.Response:
        name = server.config.served_model_name
        card = {
            "id": name,
            "object": "model",
            "created": server.created,
            "owned_by": "loadgen-sim",
            "root": name,
            "parent": None,
            "max_model_len": server.config.context_len,
        }
        # Adapters as vLLM lists its --lora-modules: their own id, the base as parent.
        loras = [{**card, "id": a, "root": a, "parent": name} for a in server.config.lora_adapters]
        return _json({"object": "list", "data": [card, *loras]})

    async def version_info(request: web.Request) -> web.Response:
        return _json({"version": version, "server": "loadgen-sim", "preset": server.config.preset})

    async def info(request: web.Request) -> web.Response:
        return _json(server.config.describe())

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=server.metrics.render_engine(server.engine).encode(), headers=_PROMETHEUS)

    async def dcgm(request: web.Request) -> web.Response:
        text = server.gpus.render(server.engine, time.perf_counter_ns())
        return web.Response(body=text.encode(), headers=_PROMETHEUS)

    async def gpu_info(request: web.Request) -> web.Response:
        return _json(server.gpus.info(server.engine, time.perf_counter_ns()))

    async def reset(request: web.Request) -> web.Response:
        if server.engine.prefix_cache is not None:
            server.engine.prefix_cache.clear()
        server.metrics.resets += 1
        return web.Response(status=200, text="prefix cache reset\n")

    async def ground_truth(request: web.Request) -> web.Response:
        path = server.ground_truth_path
        if not path:
            body = error_body("no ground_truth_path was configured", 404, "NotFoundError", None)
            return web.Response(status=404, body=body, content_type="application/json")
        server.flush_log()
        return web.Response(body=path.read_bytes(), content_type="application/x-ndjson")

    return [
        web.get("/health", health),
        web.get("/v1/models", models),
        web.get("/version", version_info),
        web.get("/metrics", metrics),
        web.get("/sim/info", info),
        web.get("/sim/ground_truth", ground_truth),
        web.get("/sim/gpu", gpu_info),  # the GPU's ground truth (energy, tokens)
        web.get(DCGM_PATH, dcgm),  # a DCGM exporter's metrics of its GPUs
        web.post("/reset_prefix_cache", reset),  # vLLM's name
        web.post("/flush_cache", reset),  # SGLang's (GET or POST)
        web.get("/flush_cache", reset),
    ]
