"""The scripted test server's pooling endpoints, answered whole: ``POST /v1/embeddings`` (the
OpenAI shape: ``data[].embedding``, ``usage.prompt_tokens``) and ``POST /v1/rerank`` /
``/rerank`` (the Jina/Cohere shape vLLM serves: ``results[].index/relevance_score``,
``usage.total_tokens``).

Scripted by the same ``loadgen_test`` object as the streams: ``ttft_ms`` is the delay before
the answer (plus ``item_ms`` per input or document, default 0), ``dim`` the vectors' length
(default 4; float lists, or float32 bytes in base64 for ``encoding_format: base64``),
``fail`` ``status:<code>`` (an OpenAI-style error body), ``garbage`` (a body that is not
JSON), ``truncated`` (the answer cut in half), ``wrong_count`` (one embedding or result
fewer than sent), ``error_body`` (a 200 whose body is ``{"error": ...}``), ``stall`` (the
status line, then silence), ``reset`` (a TCP reset before the answer), with ``fail_every``.
Token counts are ``toy_token_count``'s (a rerank pair: query plus document). The log entry is
``common.Log``'s plus ``endpoint`` and ``items``; ``end_ns`` is the instant before the body
was handed to the socket, so no client can see the answer before it.

Like the rest of the scripted server, it imports nothing from the client side.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
import zlib
from typing import Any

from loadgen.testing.common import Log, pace_until, reset_connection, scripted
from loadgen.testing.openai_stream import toy_token_count


def _count(text: str) -> int:
    return toy_token_count(text, False)


def _items(body: dict, rerank: bool) -> tuple[list[str], int]:
    """(the items, their prompt tokens as the server counts them)."""
    if rerank:
        docs, query = body["documents"], body["query"]
        return docs, sum(_count(query) + _count(d) for d in docs)
    inputs = body["input"]
    inputs = [inputs] if isinstance(inputs, str) else inputs
    return inputs, sum(_count(t) for t in inputs)


def _base64(vec: list[float]) -> str:
    """float32 little-endian bytes in base64, as vLLM answers ``encoding_format: base64``."""
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()


def _answer(
    rid: str, model: str, items: list[str], tokens: int, rerank: bool, dim: int, drop: int, b64: bool
) -> dict:
    keep = items[: len(items) - drop]
    if rerank:
        results = [
            {"index": i, "relevance_score": (zlib.crc32(d.encode()) % 1000) / 1000}
            for i, d in enumerate(keep)
        ]
        return {"id": rid, "model": model, "results": results, "usage": {"total_tokens": tokens}}
    vectors = [[((zlib.crc32(t.encode()) >> k) & 255) / 255 for k in range(dim)] for t in keep]
    data = [
        {"index": i, "object": "embedding", "embedding": _base64(v) if b64 else v}
        for i, v in enumerate(vectors)
    ]
    return {
        "id": rid,
        "object": "list",
        "model": model,
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def add_routes(app: Any, defaults: dict, log: Log, counter: Any) -> None:
    from aiohttp import web

    async def pooled(request: web.Request) -> web.StreamResponse:
        recv_ns = time.perf_counter_ns()
        body = await request.json()
        cfg, n = scripted(defaults, body, counter)
        rerank = request.path.endswith("rerank")
        rid = f"{'rerank' if rerank else 'embd'}-test-{n}"
        items, tokens = _items(body, rerank)
        entry = log.open(rid, recv_ns, request, tokens)
        entry.update(endpoint="rerank" if rerank else "embeddings", items=len(items))
        fail = str(cfg.get("fail") or "")
        await pace_until(recv_ns + int((cfg["ttft_ms"] + cfg.get("item_ms", 0.0) * len(items)) * 1e6))
        if fail.startswith("status:"):
            code = int(fail.split(":", 1)[1])
            err = {"error": {"message": f"scripted failure {code}", "type": "ScriptedError", "code": code}}
            entry["end_ns"] = time.perf_counter_ns()
            return web.json_response(err, status=code)
        if fail == "reset":
            reset_connection(request)
            return web.Response()
        headers = {"x-request-id": rid, "Content-Type": "application/json"}
        if fail == "stall":
            resp = web.StreamResponse(headers=headers)
            await resp.prepare(request)
            await asyncio.Event().wait()  # until the client gives up and the handler is cancelled
        answer = _answer(
            rid,
            str(body.get("model")),
            items,
            tokens,
            rerank,
            int(cfg.get("dim", 4)),
            1 if fail == "wrong_count" else 0,
            body.get("encoding_format") == "base64",
        )
        data = json.dumps(
            {"error": {"message": "scripted error body"}} if fail == "error_body" else answer
        ).encode()
        if fail == "garbage":
            data = b"<html>not json</html>"
        elif fail == "truncated":
            data = data[: len(data) // 2]
        entry["end_ns"] = time.perf_counter_ns()
        return web.Response(body=data, headers=headers)

    app.router.add_post("/v1/embeddings", pooled)
    app.router.add_post("/v1/rerank", pooled)
    app.router.add_post("/rerank", pooled)
