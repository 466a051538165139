"""Test helpers users and loadgen's own tests import: a scripted OpenAI-style streaming server.

The server runs in its own process (``StreamServer``), so its timing is not disturbed by the
client under test, and logs on the same monotonic clock (CLOCK_MONOTONIC via
``time.perf_counter_ns``) exactly when it handed each event to the socket. ``GET /_log`` returns
that log; tests match it to loadgen's records through the response id. Each OpenAI entry also
carries ``answer``, the content text the server really sent (reasoning excluded).

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
    wrong_mod              n: with ``answer``, prompts whose crc32(text, utf-8) % n == 0 get a
                           wrong answer (a number off by one, else the first word changed), so a
                           test knows exactly which prompts of N change, whatever their order

The same server also speaks Triton's generate extension and SGLang's native ``/generate``
(``native.py``), scripted the same way.

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

from loadgen.testing.common import WORDS, Log, answer_pieces, event, pace_until, prompt_text, reset_connection


async def _stream(request: Any, body: dict, cfg: dict, log: Log, rid: str, recv_ns: int) -> Any:
    from aiohttp import web

    chat = request.path.endswith("/chat/completions")
    n_out = int(body.get("max_tokens") or cfg["default_tokens"])
    opts = body.get("stream_options") or {}
    usage_on = bool(opts.get("include_usage"))
    continuous = bool(opts.get("continuous_usage_stats"))
    fail = cfg.get("fail") or ""
    fail_kind, _, fail_arg = fail.partition(":")
    fail_n = int(fail_arg) if fail_arg.isdigit() else 0
    prompt = body.get("messages") if chat else body.get("prompt")
    if cfg.get("tokenize"):
        prompt_tokens = toy_token_count(prompt, chat)
    else:
        prompt_tokens = (
            len(prompt) if isinstance(prompt, list) and not chat else len(json.dumps(prompt).split())
        )

    if fail_kind == "status":
        code = int(fail_arg or 500)
        return web.json_response({"error": {"message": f"scripted HTTP {code}", "code": code}}, status=code)
    n_reason = int(cfg.get("reasoning_tokens", 0))
    script: list[str] | None = None  # answer mode: every token's text, decided up front
    finish = "length"
    if cfg.get("answer") is not None:
        if cfg["answer"] != "solve":
            msg = f"unknown loadgen_test.answer {cfg['answer']!r}; valid: solve"
            return web.json_response({"error": {"message": msg, "code": 400}}, status=400)
        script, n_out, finish = _answer_script(body, cfg, chat, n_reason)

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "x-request-id": rid})
    await resp.prepare(request)
    entry = log.open(rid, recv_ns, request, prompt_tokens)
    entry["answer"] = ""
    # What was asked, as received: a test checks a multi-turn history against it.
    entry["messages" if chat else "prompt"] = body.get("messages" if chat else "prompt")
    content: list[str] = []  # the content text as sent, logged however the stream ends
    try:
        if fail_kind == "garbage":
            await resp.write(b"this is not an event stream\n\n")
            await resp.write_eof()
            return resp
        obj_name = "chat.completion.chunk" if chat else "text_completion"
        base = {
            "id": rid,
            "object": obj_name,
            "created": int(time.time()),
            "model": body.get("model", "test"),
        }

        def chunk(choice: dict, usage: dict | None = None) -> bytes:
            d = dict(base, choices=[choice] if choice else [])
            if usage is not None:
                d["usage"] = usage
            return event(d)

        if chat and cfg.get("role_first", True):
            await resp.write(
                chunk(
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None},
                    {"prompt_tokens": prompt_tokens, "completion_tokens": 0} if continuous else None,
                )
            )
        tpc = cfg.get("tokens_per_chunk", 1)
        pattern = itertools.cycle(tpc if isinstance(tpc, list) else [tpc])
        ttft_ns = int(cfg["ttft_ms"] * 1e6)
        itl_ns = int(cfg["itl_ms"] * 1e6)
        start = recv_ns + ttft_ns
        sent = 0
        k = 0
        while sent < n_out:
            if fail_kind == "reset_after" and k == fail_n:
                reset_connection(request)
                entry["end_ns"] = time.perf_counter_ns()
                return resp
            if fail_kind == "stall_after" and k == fail_n:
                entry["answer"] = "".join(content)
                await asyncio.sleep(3600)
            if fail_kind == "malformed_after" and k == fail_n:
                await resp.write(b'data: {"id": "' + rid.encode() + b'", "choices": [{"delta": {"conte\n\n')
                entry["end_ns"] = time.perf_counter_ns()
                await resp.write_eof()
                return resp
            if fail_kind == "error_event_after" and k == fail_n:
                await resp.write(event({"error": {"message": "scripted in-stream error", "code": 500}}))
                entry["end_ns"] = time.perf_counter_ns()
                await resp.write_eof()
                return resp
            n = min(next(pattern), n_out - sent)
            deadline = start + k * itl_ns
            await pace_until(deadline)
            if script is not None:
                text = "".join(script[sent : sent + n])
            else:
                text = "".join(" " + WORDS[(sent + j) % len(WORDS)] for j in range(n))
            key = "reasoning_content" if sent < n_reason else "content"
            if chat:
                choice = {"index": 0, "delta": {key: text}, "finish_reason": None}
            else:
                choice = {"index": 0, "text": text, "finish_reason": None}
            sent += n
            u = (
                {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": sent,
                    "total_tokens": prompt_tokens + sent,
                }
                if continuous
                else None
            )
            data = chunk(choice, u)
            # Stamped just before the bytes go to the socket: the client's timestamp of the same
            # event can only be later, and the difference is the client's whole receive path.
            t = time.perf_counter_ns()
            await resp.write(data)
            entry["chunk_ns"].append(t)
            entry["chunk_tokens"].append(n)
            if key == "content":
                content.append(text)
            if entry["first_token_ns"] is None:
                entry["first_token_ns"] = t
            k += 1
        final: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            final["delta"] = {}
        else:
            final["text"] = ""
        await resp.write(chunk(final))
        if usage_on:
            await resp.write(
                chunk(
                    {},
                    {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": sent,
                        "total_tokens": prompt_tokens + sent,
                    },
                )
            )
        if fail_kind != "no_done":
            await resp.write(b"data: [DONE]\n\n")
        entry["end_ns"] = time.perf_counter_ns()
        await resp.write_eof()
        return resp
    finally:
        entry["answer"] = "".join(content)


def _answer_script(body: dict, cfg: dict, chat: bool, n_reason: int) -> tuple[list[str], int, str]:
    """Answer mode: every token's text (``n_reason`` filler words, then the answer's words), how
    many of them to send (max_tokens caps it) and the finish reason ("stop" for a whole answer
    to a task it solved, else "length")."""
    cap = int(body["max_tokens"]) if body.get("max_tokens") else None
    n_unknown = max((cap or int(cfg["default_tokens"])) - n_reason, 0)
    pieces, solved = answer_pieces(prompt_text(body, chat), int(cfg.get("wrong_mod") or 0), n_unknown)
    script = [" " + WORDS[j % len(WORDS)] for j in range(n_reason)] + pieces
    n_out = len(script) if cap is None else min(cap, len(script))
    return script, n_out, "stop" if solved and n_out == len(script) else "length"


def toy_token_count(prompt: Any, chat: bool) -> int:
    """The test server's own tokenizer (served at /tokenize when ``tokenize`` is on): a word of
    up to 6 letters is one token, longer words more; completions add a BOS token, chat a
    template of 3 tokens per message plus 2. Deliberately unlike one-word-one-token."""

    def words(text: str) -> int:
        return sum(1 + len(w) // 7 for w in text.split())

    if chat:
        return sum(3 + words(m.get("content") or "") for m in prompt) + 2
    if isinstance(prompt, list):
        return len(prompt) + 1
    return words(prompt) + 1


def make_app(defaults: dict) -> Any:
    from aiohttp import web

    log = Log()
    counter = itertools.count()

    async def completions(request: web.Request) -> Any:
        recv_ns = time.perf_counter_ns()
        body = await request.json()
        cfg = dict(defaults)
        cfg.update(body.get("loadgen_test") or {})
        prefix = "chatcmpl" if request.path.endswith("/chat/completions") else "cmpl"
        n = next(counter)
        rid = f"{prefix}-test-{n}"
        if cfg.get("fail_every") and n % int(cfg["fail_every"]) != 0:
            cfg["fail"] = ""
        return await _stream(request, body, cfg, log, rid, recv_ns)

    async def models(request: web.Request) -> Any:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": defaults["model"],
                        "object": "model",
                        "owned_by": "loadgen-testing",
                        "max_model_len": 32768,
                    }
                ],
            }
        )

    async def tokenize(request: web.Request) -> Any:
        # vLLM's shape: {"model", "prompt"} or {"model", "messages"} -> {"count", "tokens", ...}
        if not defaults.get("tokenize"):
            raise web.HTTPNotFound()
        body = await request.json()
        chat = "messages" in body
        n = toy_token_count(body["messages"] if chat else body["prompt"], chat)
        return web.json_response({"count": n, "max_model_len": 32768, "tokens": list(range(n))})

    async def get_log(request: web.Request) -> Any:
        return web.json_response(list(log.entries.values()))

    async def clear_log(request: web.Request) -> Any:
        log.entries.clear()
        return web.json_response({"cleared": True})

    async def health(request: web.Request) -> Any:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/_log", get_log)
    app.router.add_delete("/_log", clear_log)
    from loadgen.testing.native import add_routes  # Triton's and SGLang's native protocols

    add_routes(app, defaults, log, counter)
    return app


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
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            if self.proc.stderr is not None:
                self.proc.stderr.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m loadgen.testing", description="Scripted OpenAI-style streaming server for tests."
    )
    p.add_argument("--port", type=int, default=0, help="port to listen on (0 = any free port)")
    p.add_argument("--config", default="{}", help="JSON object of server defaults (ttft_ms, itl_ms, ...)")
    a = p.parse_args(argv)
    cfg = json.loads(a.config)
    serve(port=a.port, **cfg)
