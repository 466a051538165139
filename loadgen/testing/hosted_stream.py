"""The scripted test server's hosted-API streams: OpenAI's Responses API (``POST /v1/responses``)
and Anthropic's Messages API (``POST /v1/messages``), each as its provider documents it.

    /v1/responses   response.created, response.in_progress, per output item (reasoning, then
                    message) output_item.added / content_part.added, one
                    response.reasoning_text.delta or response.output_text.delta per event, the
                    *.done events, then response.completed with usage {input_tokens,
                    output_tokens, output_tokens_details.reasoning_tokens}. No [DONE].
    /v1/messages    message_start (usage.input_tokens), ping, a thinking block then a text block
                    (content_block_start, content_block_delta thinking_delta / text_delta,
                    content_block_stop), message_delta (stop_reason, usage.output_tokens),
                    message_stop. Every event with its ``event:`` line. Hosted-API-shaped: the
                    ``anthropic-version`` header is required (400 without it) and, when the
                    server's defaults set ``api_key``, so is ``x-api-key`` with that value (401).

Scripted by the same ``loadgen_test`` object as the OpenAI endpoints (ttft_ms, itl_ms,
tokens_per_chunk, reasoning_tokens, fail, fail_every), with the faults in these shapes:
``status:<code>`` (the provider's error body), ``garbage``, ``reset_after:<n>``,
``stall_after:<n>``, ``malformed_after:<n>`` (a cut event), ``no_done:`` (no terminal event),
``error_event_after:<n>`` (Responses: an ``error`` event; Messages: an ``error`` event of type
``error_type``, default ``overloaded_error``) and, Responses only, ``failed_after:<n>``
(``response.failed``). The log entry of each request is the OpenAI one (``common.Log``) plus
``endpoint``, ``messages`` (the turns received), ``output_tokens``, ``reasoning_tokens``, the
``answer`` text sent, and whether a
key came (``key_header``: the header that carried one; never the key itself).

Like the rest of the scripted server, it imports nothing from the client side.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import time
from typing import Any

from loadgen.testing.common import WORDS, Log, end_stream, pace_until, reset_connection, scripted


def _ev(name: str, obj: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


class _Responses:
    """The Responses API's events for one response."""

    def __init__(self, rid: str, model: str, prompt_tokens: int) -> None:
        self.rid, self.model, self.prompt_tokens = rid, model, prompt_tokens
        self.seq = 0

    def e(self, name: str, **fields: Any) -> bytes:
        self.seq += 1
        return _ev(name, {"type": name, "sequence_number": self.seq, **fields})

    def response(self, status: str, **more: Any) -> dict[str, Any]:
        return {"id": self.rid, "object": "response", "model": self.model, "status": status, **more}

    def start(self) -> bytes:
        r = self.response("in_progress", output=[], usage=None)
        return self.e("response.created", response=r) + self.e("response.in_progress", response=r)

    def open(self, kind: str, index: int) -> bytes:
        item = {"id": f"{kind}-{index}", "type": kind, "status": "in_progress"}
        part = {"type": "reasoning_text" if kind == "reasoning" else "output_text", "text": ""}
        return self.e("response.output_item.added", output_index=index, item=item) + self.e(
            "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part
        )

    def delta(self, kind: str, index: int, text: str) -> bytes:
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        return self.e(name, item_id=f"{kind}-{index}", output_index=index, content_index=0, delta=text)

    def close(self, kind: str, index: int, text: str) -> bytes:
        name = "response.reasoning_text.done" if kind == "reasoning" else "response.output_text.done"
        item = {"id": f"{kind}-{index}", "type": kind, "status": "completed"}
        return self.e(name, item_id=item["id"], output_index=index, content_index=0, text=text) + self.e(
            "response.output_item.done", output_index=index, item=item
        )

    def end(self, sent: int, reasoning: int) -> bytes:
        usage = {
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": sent,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": self.prompt_tokens + sent,
        }
        return self.e("response.completed", response=self.response("completed", usage=usage))

    def error(self, cfg: dict) -> bytes:
        return self.e("error", code="server_error", message="scripted in-stream error", param=None)

    def failed(self) -> bytes:
        err = {"code": "server_error", "message": "scripted response.failed"}
        return self.e("response.failed", response=self.response("failed", error=err))

    @staticmethod
    def error_body(code: int) -> dict:
        return {"error": {"message": f"scripted HTTP {code}", "type": "server_error", "code": code}}


class _Messages:
    """The Messages API's events for one message."""

    def __init__(self, rid: str, model: str, prompt_tokens: int) -> None:
        self.rid, self.model, self.prompt_tokens = rid, model, prompt_tokens

    def start(self) -> bytes:
        msg: dict[str, Any] = {
            "id": self.rid,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 1},
        }
        return _ev("message_start", {"type": "message_start", "message": msg}) + _ev("ping", {"type": "ping"})

    def open(self, kind: str, index: int) -> bytes:
        kind = "thinking" if kind == "reasoning" else "text"
        block = {"type": kind, kind: ""}
        return _ev(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        )

    def delta(self, kind: str, index: int, text: str) -> bytes:
        key = "thinking" if kind == "reasoning" else "text"
        d = {"type": "content_block_delta", "index": index, "delta": {"type": f"{key}_delta", key: text}}
        return _ev("content_block_delta", d)

    def close(self, kind: str, index: int, text: str) -> bytes:
        out = b""
        if kind == "reasoning":  # a thinking block ends with its signature
            sig = {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "signature_delta", "signature": "c2ln"},
            }
            out = _ev("content_block_delta", sig)
        return out + _ev("content_block_stop", {"type": "content_block_stop", "index": index})

    def end(self, sent: int, reasoning: int) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": sent},
        }
        return _ev("message_delta", delta) + _ev("message_stop", {"type": "message_stop"})

    def error(self, cfg: dict) -> bytes:
        kind = cfg.get("error_type") or "overloaded_error"
        return _ev("error", {"type": "error", "error": {"type": kind, "message": "scripted in-stream error"}})

    failed = None

    @staticmethod
    def error_body(code: int) -> dict:
        kind = {429: "rate_limit_error", 529: "overloaded_error", 401: "authentication_error"}.get(
            code, "api_error"
        )
        return {"type": "error", "error": {"type": kind, "message": f"scripted HTTP {code}"}}


def _prompt(body: dict, endpoint: str) -> tuple[Any, int | None]:
    """The turns asked for, and the token budget; the Responses input may be a plain string."""
    if endpoint == "responses":
        given = body.get("input")
        return given, body.get("max_output_tokens")
    system = body.get("system")
    turns = body.get("messages")
    return ([{"role": "system", "content": system}] if system else []) + list(turns or []), body.get(
        "max_tokens"
    )


def _key_header(request: Any) -> str | None:
    for name in ("x-api-key", "authorization"):
        if request.headers.get(name):
            return name
    return None


async def _play(request: Any, body: dict, cfg: dict, log: Log, rid: str, recv_ns: int, endpoint: str) -> Any:
    """One hosted-API stream on the script's schedule, logged as it goes to the socket."""
    from aiohttp import web

    proto_cls = _Responses if endpoint == "responses" else _Messages
    fail_kind, _, fail_arg = (cfg.get("fail") or "").partition(":")
    if fail_kind == "status":
        code = int(fail_arg or 500)
        return web.json_response(proto_cls.error_body(code), status=code)
    turns, budget = _prompt(body, endpoint)
    prompt_tokens = len(json.dumps(turns).split())
    n_out = int(budget or cfg["default_tokens"])
    proto = proto_cls(rid, body.get("model", "test"), prompt_tokens)
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "request-id": rid, "x-request-id": rid}
    )
    await resp.prepare(request)
    entry = log.open(rid, recv_ns, request, prompt_tokens)
    n_reason = min(int(cfg.get("reasoning_tokens", 0)), n_out)
    entry.update(
        endpoint=endpoint, answer="", output_tokens=0, reasoning_tokens=0, key_header=_key_header(request)
    )
    entry["messages"] = turns  # as received (Messages: its system field as the first turn)

    end = functools.partial(end_stream, resp, entry)

    if fail_kind == "garbage":
        return await end(b"this is not an event stream\n\n")
    await resp.write(proto.start())
    tpc = cfg.get("tokens_per_chunk", 1)
    pattern = itertools.cycle(tpc if isinstance(tpc, list) else [tpc])
    fail_n = int(fail_arg) if fail_arg.isdigit() else 0
    start, itl_ns = recv_ns + int(cfg["ttft_ms"] * 1e6), int(cfg["itl_ms"] * 1e6)
    sent = k = 0
    kind: str | None = None
    index = -1
    texts: list[str] = []
    while sent < n_out:
        if k == fail_n and fail_kind:
            if fail_kind == "reset_after":
                reset_connection(request)
                entry["end_ns"] = time.perf_counter_ns()
                return resp
            if fail_kind == "stall_after":
                await asyncio.sleep(3600)
            if fail_kind == "malformed_after":
                return await end(b'event: x\ndata: {"type": "response.output_text.delta", "del\n\n')
            if fail_kind == "error_event_after":
                return await end(proto.error(cfg))
            if fail_kind == "failed_after" and proto.failed is not None:
                return await end(proto.failed())
        n = min(next(pattern), n_out - sent)
        await pace_until(start + k * itl_ns)
        now_kind = "reasoning" if sent < n_reason else "message"
        data = b""
        if now_kind != kind:
            if kind is not None:
                data += proto.close(kind, index, "".join(texts))
            kind, index, texts = now_kind, index + 1, []
            data += proto.open(kind, index)
        text = "".join(" " + WORDS[(sent + j) % len(WORDS)] for j in range(n))
        data += proto.delta(kind, index, text)
        texts.append(text)
        sent += n
        t = time.perf_counter_ns()
        await resp.write(data)
        entry["chunk_ns"].append(t)
        entry["chunk_tokens"].append(n)
        entry["output_tokens"] = sent
        if kind == "reasoning":
            entry["reasoning_tokens"] = sent
        else:
            entry["answer"] += text
        if entry["first_token_ns"] is None:
            entry["first_token_ns"] = t
        k += 1
    tail = proto.close(kind, index, "".join(texts)) if kind is not None else b""
    if fail_kind != "no_done":
        tail += proto.end(sent, min(n_reason, sent))
    return await end(tail)


def add_routes(app: Any, defaults: dict, log: Log, counter: Any) -> None:
    """Add ``/v1/responses`` and ``/v1/messages`` to the test server's aiohttp app."""
    from aiohttp import web

    async def responses(request: web.Request) -> web.StreamResponse:
        recv_ns = time.perf_counter_ns()
        body = await request.json()
        cfg, n = scripted(defaults, body, counter)
        return await _play(request, body, cfg, log, f"resp-test-{n}", recv_ns, "responses")

    async def messages(request: web.Request) -> web.StreamResponse:
        recv_ns = time.perf_counter_ns()
        if not request.headers.get("anthropic-version"):
            return web.json_response(
                _Messages.error_body(400)
                | {
                    "error": {
                        "type": "invalid_request_error",
                        "message": "anthropic-version: header is required",
                    }
                },
                status=400,
            )
        key = defaults.get("api_key")
        if key and request.headers.get("x-api-key") != key:
            return web.json_response(
                _Messages.error_body(401)
                | {"error": {"type": "authentication_error", "message": "invalid x-api-key"}},
                status=401,
            )
        body = await request.json()
        cfg, n = scripted(defaults, body, counter)
        return await _play(request, body, cfg, log, f"msg-test-{n}", recv_ns, "messages")

    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/messages", messages)
