"""Test helpers users and loadgen's own tests import: a scripted OpenAI-style streaming server.

The server runs in its own process (``StreamServer``), so its timing is not disturbed by the
client under test, and logs on the same monotonic clock (CLOCK_MONOTONIC via
``time.perf_counter_ns``) exactly when it handed each event to the socket. ``GET /_log`` returns
that log; tests match it to loadgen's records through the response id. Each OpenAI entry also
carries ``answer``, the content text the server really sent (reasoning excluded), and each chat
entry ``media``: the images and audio clips its content parts carried and the bytes their
base64 decoded to (its ``messages`` then keep the text only).

Behaviour is scripted per request through a ``loadgen_test`` object in the request body (the
profile's ``target.extra_body`` puts it there), over the server's defaults:

    ttft_ms, itl_ms        delay before the first content event, and between content events
    tokens_per_chunk       int, or a list cycled over the chunks (multi-token events)
    role_first             chat: send a role-only delta first, as vLLM does (default true)
    reasoning_tokens       the first N tokens are sent as ``reasoning_content``
    fail                   "status:<code>" | "reset_after:<n>" | "malformed_after:<n>" |
                           "garbage" | "no_done" | "stall_after:<n>" | "error_event_after:<n>"
    fail_every             apply ``fail`` only to every n-th request the server receives
    answer                 "solve": answer the built-in quality tasks (loadgen/quality/tasks.py)
                           right, read from the prompt text (chat: the last user message), one
                           word a token ("475" / "apple", " river"), then finish_reason "stop";
                           max_tokens caps it ("length"). Other prompts get max_tokens (or the
                           default) words seeded by the prompt's crc32: same prompt, same words
    tool_call              NAME: chat answers are a call of function NAME (its first event names
                           it, each later one a piece of its JSON arguments, finish_reason
                           "tool_calls"; the log's ``tool_call`` names it), except an answer to a
                           request whose last message is a ``role: tool`` result: text
    tokenizer_dir          a model folder (tokenizer.json, tokenizer_config.json with a chat_template):
                           chat usage.prompt_tokens is the messages rendered through its chat
                           template and encoded with its tokenizer, as a real server counts them
    wrong_mod              n: with ``answer``, prompts whose crc32(text, utf-8) % n == 0 get a
                           wrong answer (a number off by one, else the first word changed), so a
                           test knows exactly which prompts of N change, whatever their order
    log_bodies             chat and completions: the log's ``body_b64`` is the request body's bytes
                           as received, base64 (a custom body compared byte for byte)

The OpenAI stream itself is ``openai_stream.py``. The same server also speaks Triton's generate
extension and SGLang's native ``/generate`` (``native.py``), and the Responses and Anthropic
Messages APIs (``hosted_stream.py``), and embeddings and rerank answered whole (``pooling.py``),
scripted the same way.

Like the simulator, this module imports nothing from the client side, so a bug shared between
an encoder and a decoder cannot hide itself.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from typing import Any

from loadgen.testing.common import Log, end_process, scripted
from loadgen.testing.openai_stream import stream, toy_token_count

__all__ = ["StreamServer", "main", "make_app", "serve", "toy_token_count"]  # toy_token_count: re-exported


def make_app(defaults: dict) -> Any:
    """The scripted server's aiohttp app: the OpenAI routes, its own service routes (models,
    health, tokenize, the log), Triton's and SGLang's native protocols and the hosted APIs'
    streams (Responses, Messages), on one log."""
    from aiohttp import web

    log = Log()
    counter = itertools.count()  # one count of requests across every protocol (fail_every)
    app = web.Application(client_max_size=64 << 20)
    _add_openai_routes(app, defaults, log, counter)
    _add_service_routes(app, defaults, log)
    from loadgen.testing.native import add_routes  # Triton's and SGLang's native protocols

    add_routes(app, defaults, log, counter)
    from loadgen.testing import hosted_stream  # OpenAI's Responses API and Anthropic's Messages

    hosted_stream.add_routes(app, defaults, log, counter)
    from loadgen.testing import pooling  # embeddings and rerank, answered whole

    pooling.add_routes(app, defaults, log, counter)
    return app


def _add_openai_routes(app: Any, defaults: dict, log: Log, counter: Any) -> None:
    """Chat and completions: each request's script over the defaults, then its stream."""
    from aiohttp import web

    async def completions(request: web.Request) -> web.StreamResponse:
        recv_ns = time.perf_counter_ns()
        body = await request.json()
        cfg, n = scripted(defaults, body, counter)
        prefix = "chatcmpl" if request.path.endswith("/chat/completions") else "cmpl"
        return await stream(request, body, cfg, log, f"{prefix}-test-{n}", recv_ns)

    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)


def _add_service_routes(app: Any, defaults: dict, log: Log) -> None:
    """What a client asks besides a stream: the model list, health, /tokenize (vLLM's shape, when
    ``tokenize`` is on), and the ground-truth log a test reads and clears."""
    from aiohttp import web

    async def models(request: web.Request) -> web.StreamResponse:
        model = {
            "id": defaults["model"],
            "object": "model",
            "owned_by": "loadgen-testing",
            "max_model_len": 32768,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def tokenize(request: web.Request) -> web.StreamResponse:
        # vLLM's shape: {"model", "prompt"} or {"model", "messages"} -> {"count", "tokens", ...}
        if not defaults.get("tokenize"):
            raise web.HTTPNotFound()
        body = await request.json()
        chat = "messages" in body
        n = toy_token_count(body["messages"] if chat else body["prompt"], chat)
        return web.json_response({"count": n, "max_model_len": 32768, "tokens": list(range(n))})

    async def get_log(request: web.Request) -> web.StreamResponse:
        return web.json_response(list(log.entries.values()))

    async def clear_log(request: web.Request) -> web.StreamResponse:
        log.entries.clear()
        return web.json_response({"cleared": True})

    async def health(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/_log", get_log)
    app.router.add_delete("/_log", clear_log)


def serve(port: int = 0, host: str = "127.0.0.1", **defaults: Any) -> None:
    """Run the test server in this process until killed; prints {"port": N} once listening."""
    from aiohttp import web

    cfg = {
        "ttft_ms": 50.0,
        "itl_ms": 10.0,
        "tokens_per_chunk": 1,
        "role_first": True,
        "default_tokens": 16,
        "model": "test-model",
        "fail": "",
    }
    cfg.update({k: v for k, v in defaults.items() if v is not None})
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def main() -> None:
        runner = web.AppRunner(make_app(cfg), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        real = runner.addresses[0][1]
        print(json.dumps({"port": real}), flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class StreamServer:
    """The scripted server in a child process; ``with StreamServer(ttft_ms=50) as s: s.url``."""

    def __init__(self, **defaults: Any) -> None:
        self.defaults = defaults
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> StreamServer:
        args = [sys.executable, "-m", "loadgen.testing", "--config", json.dumps(self.defaults)]
        proc = self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None and proc.stderr is not None  # both are PIPEs
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"test server failed to start: {proc.stderr.read()}")
        self.url = f"http://127.0.0.1:{json.loads(line)['port']}"
        return self

    def log(self) -> dict[str, dict]:
        import urllib.request

        with urllib.request.urlopen(self.url + "/_log", timeout=10) as r:
            return {e["id"]: e for e in json.loads(r.read())}

    def clear_log(self) -> None:
        import urllib.request

        req = urllib.request.Request(self.url + "/_log", method="DELETE")
        urllib.request.urlopen(req, timeout=10).read()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            end_process(self.proc)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m loadgen.testing", description="Scripted OpenAI-style streaming server for tests."
    )
    p.add_argument("--port", type=int, default=0, help="port to listen on (0 = any free port)")
    p.add_argument("--config", default="{}", help="JSON object of server defaults (ttft_ms, itl_ms, ...)")
    a = p.parse_args(argv)
    cfg = json.loads(a.config)
    serve(port=a.port, **cfg)
