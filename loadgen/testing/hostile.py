"""A hostile OpenAI-style streaming server: one fault per mode, down to the bytes on the socket.

The scripted server (``server.py``) is built on aiohttp and can only misbehave as aiohttp lets it.
This one is a raw asyncio TCP server that writes every HTTP/1.1 byte itself, so it can reset a
connection mid-event, close it inside a chunk, write one byte at a time, or never accept at all.
It speaks just enough of the OpenAI API to be benchmarked: ``GET /v1/models`` (a one-model list),
``POST /v1/chat/completions`` and ``POST /v1/completions`` streaming SSE (``data: {json}`` events
of ``choices[0].delta.content`` / ``choices[0].text``, a usage chunk when
``stream_options.include_usage`` asks for one, ``data: [DONE]``), 404 for anything else
(``/version``, ``/tokenize``, ``/metrics``). Connections are kept alive unless the mode says
otherwise; streamed bodies use chunked transfer encoding, one SSE event per chunk.

It runs in a background thread with its own event loop::

    with HostileServer("reset_mid_stream") as srv:
        ...  # point a client at srv.url
        srv.requests_seen, srv.streams_finished

``requests_seen`` counts every request fully received on the streaming paths (a client that
silently re-sends makes it grow), ``streams_finished`` every streamed 200 response written to
its end, ``unanswered`` every request closed on without an answer (``close_without_answer``,
``dies``); ``errors`` lists anything that went wrong inside the server itself (a bug here, not
in the client). All are safe to read from any thread. ``python -m loadgen.testing.hostile MODE``
serves one mode in the foreground, for poking at it by hand.

Modes (the faults apply to the streaming paths; ``/v1/models`` answers normally unless noted):

    ok                    a well-behaved stream (the control case)
    http_500              500 with an OpenAI-style JSON error body
    http_429              429 with ``Retry-After: 7`` and a JSON error body
    reset_mid_stream      a few events, then a TCP reset (RST)
    stall                 a few events, then silence with the connection held open
    slow_headers          the status line and headers only after ``headers_delay_s``
    garbage_lines         200 text/event-stream whose body is lines that are not SSE
    non_object_json       an event whose JSON is not an object (``data: [1,2]``)
    no_data_prefix        every event's JSON (and ``[DONE]``) without its ``data:`` prefix
    not_sse               200 with a plain (non-streaming) JSON completion body
    no_done               a complete stream that never sends ``data: [DONE]``: the finish and
                          the usage chunk, then a clean end (Hugging Face's ``transformers serve``)
    no_finish             content events, then a clean end of the body: no finish_reason, no
                          usage, no ``[DONE]`` (a stream cut short that looks like an end)
    unknown_field_422     ``transformers serve``'s refusal: a request carrying ``ignore_eos`` is a
                          422 ``{"detail": "Unexpected fields in the request: {'ignore_eos'}"}``;
                          one without is streamed as ``no_done`` streams it
    fin_mid_chunk         a few events, then a chunk header and half its bytes, then FIN
    invalid_utf8          an event whose JSON carries raw 0xff bytes
    huge_event            one content event of ``huge_bytes`` (10 MB) of valid JSON, then [DONE]
    one_byte_writes       every response (``/v1/models`` too) written one byte per write
    connection_close      ``Connection: close`` on every response (``/v1/models`` too), then close
    dies                  answers ``die_after`` streaming requests; on the next one it closes
                          its listening socket and every connection
    never_accepts         a listening socket (``listen(0)``) whose queue is full and never
                          accepted: connecting times out
    error_event           ``data: {"error": {"message": "boom"}}`` mid-stream, then [DONE]
    object_error_event    ``data: {"object": "error", "message": "boom", "code": 400}`` mid-stream
                          (older vLLM), then [DONE]
    no_usage              never a usage chunk, even when asked for one
    zero_tokens           a valid stream without a single content event, usage of 0 tokens
    close_without_answer  every 2nd streaming request on a kept-alive connection is read whole,
                          then the connection is closed without an answer: the close arrives
                          just as the next request does
    close_after_response  every streamed response ends normally (chunked, no Connection
                          header), then the server closes after ``close_delay_s``; a request
                          the client sent on it meanwhile is dropped unanswered
    close_after_keepalive llama-server's way: ``Keep-Alive: timeout=5, max=100`` on every
                          response, and yet a FIN right after each streamed one
    keepalive_limits      ``Keep-Alive: timeout=1, max=3`` on every response; the server keeps
                          serving, and counts in ``limit_violations`` each request that came
                          as the 4th or later on a connection, or after it was idle over 1 s
    eof_body              200 with neither Content-Length nor chunked: the body ends when the
                          server closes the connection (valid HTTP/1.1)
    echo_auth_body        401 whose JSON error message echoes the request's Authorization value
    echo_auth_header      a normal stream whose responses (``/v1/models`` too) carry
                          ``x-echo-auth: <Authorization value>``, also inside the response id
    typed_choices_str     an event with ``"choices": "abc"``
    typed_delta_str       an event whose ``delta`` is a string (completions: a string choice)
    typed_usage_null      the usage chunk says ``"completion_tokens": null`` (always sent)
    tool_no_index         chat: a tool call whose second ``delta.tool_calls`` piece has no index
    tool_args_not_string  chat: a tool call piece whose ``function.arguments`` is an object
    tool_cut_mid_call     chat: a tool call's name and two argument pieces, then the stream ends
                          (no finish reason, no ``[DONE]``)
    image_too_large       a chat request carrying an image is a 400 whose JSON error says the
                          image is too large (as a server with a pixel limit answers); one
                          without is streamed normally
    responses_*, messages_*  one fault per event shape of the Responses and Messages APIs
                          (``hostile_hosted.py`` lists them); their paths answer every other
                          mode with a well-formed stream of their own shape
    pooling_*             one fault per answer shape of ``/v1/embeddings`` and ``/v1/rerank``,
                          answered whole, not streamed (``hostile_pooling.py``); ``http_500``
                          and ``stall`` apply there too, every other mode answers well-formed

Like the simulator and the scripted server, this module imports nothing from the client side
(only the standard library), so a bug shared between an encoder and a decoder cannot hide itself.
What no mode changes lives in ``hostile_wire.py`` (the loop thread, the connections) and
``hostile_http.py`` (the HTTP/1.1 bytes), the SSE events each mode sends in
``hostile_events.py``; this module holds the server, its modes, the routing and the faults.
It runs past 300 lines because of the catalogue above and the list of modes: one server
class, each step of a stream its own method.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import time
from typing import Any

from loadgen.testing.hostile_events import TOOL_MODES, full_completion, huge_text, stream_events
from loadgen.testing.hostile_hosted import HOSTED_MODES, messages_events, responses_events
from loadgen.testing.hostile_http import (
    Conn,
    Request,
    chunk,
    dumps,
    fin_after,
    hold_connection,
    reset_connection,
    response_head,
)
from loadgen.testing.hostile_pooling import POOLING_MODES, POOLING_PATHS, pooling_answer
from loadgen.testing.hostile_wire import ThreadedServer

MODES: tuple[str, ...] = (  # a list of names is data: several to a line
    *(
        "ok http_500 http_429 reset_mid_stream stall slow_headers garbage_lines non_object_json "
        "no_data_prefix not_sse no_done no_finish unknown_field_422 fin_mid_chunk invalid_utf8 huge_event "
        "one_byte_writes connection_close dies never_accepts error_event object_error_event no_usage "
        "zero_tokens close_without_answer close_after_response close_after_keepalive keepalive_limits "
        "eof_body echo_auth_body echo_auth_header typed_choices_str typed_delta_str typed_usage_null"
    ).split(),
    *TOOL_MODES,
    "image_too_large",
    *HOSTED_MODES,
    *POOLING_MODES,
)

HOSTED = {"/v1/responses": responses_events, "/v1/messages": messages_events}
STREAM_PATHS = frozenset(("/v1/chat/completions", "/v1/completions", *HOSTED, *POOLING_PATHS))
ERROR_MESSAGES = {500: "hostile server: internal error", 429: "hostile server: rate limited, slow down"}
RETRY_AFTER_S = 7
UNKNOWN_FIELD = "Unexpected fields in the request: {'ignore_eos'}"  # transformers serve's words
IMAGE_TOO_LARGE = "image too large: 4096x4096 exceeds the server's limit of 1003520 pixels"
_KEEP_ALIVE = {"close_after_keepalive": "timeout=5, max=100", "keepalive_limits": "timeout=1, max=3"}
LIMIT_TIMEOUT_S, LIMIT_MAX = 1.0, 3  # keepalive_limits' announced timeout and max


class HostileServer(ThreadedServer):
    """One fault, served on 127.0.0.1 from a background thread; see the module docstring.

    Options: ``itl_s`` (pause between events), ``tokens`` (content events per stream; default
    the request's ``max_tokens``, at most 64), ``reset_after`` / ``stall_after`` (events before
    the fault), ``headers_delay_s`` (``slow_headers``), ``die_after`` (``dies``), ``huge_bytes``
    (``huge_event``), ``close_delay_s`` (``close_after_response``), ``model`` (the listed model
    id)."""

    def __init__(
        self,
        mode: str,
        *,
        itl_s: float = 0.002,
        tokens: int | None = None,
        reset_after: int = 3,
        stall_after: int = 2,
        headers_delay_s: float = 2.0,
        die_after: int = 3,
        huge_bytes: int = 10_000_000,
        close_delay_s: float = 0.005,
        model: str = "hostile-model",
        host: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        super().__init__(host, name=f"hostile-{mode}", one_byte=mode == "one_byte_writes", tls=tls)
        self.mode = mode
        self.itl_s = itl_s
        self.tokens = tokens
        self.reset_after = reset_after
        self.stall_after = stall_after
        self.headers_delay_s = headers_delay_s
        self.die_after = die_after
        self.huge_bytes = huge_bytes
        self.close_delay_s = close_delay_s
        self._limit_violations = 0
        self.model = model
        self._requests_seen = 0
        self._streams_finished = 0
        self._unanswered = 0
        self._huge: bytes | None = None

    # ------------------------------------------------------------------ what a test reads
    # (``url`` and ``errors`` too, from ThreadedServer)
    @property
    def requests_seen(self) -> int:
        with self._lock:
            return self._requests_seen

    @property
    def streams_finished(self) -> int:
        with self._lock:
            return self._streams_finished

    @property
    def unanswered(self) -> int:
        with self._lock:
            return self._unanswered

    @property
    def limit_violations(self) -> int:
        with self._lock:
            return self._limit_violations

    def _count(self, what: str) -> int:
        with self._lock:
            value: int = getattr(self, what) + 1
            setattr(self, what, value)
            return value

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> HostileServer:
        if self.mode == "never_accepts":
            self._never_accept()
            return self
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._shutdown()

    # ------------------------------------------------------------------ HTTP
    def _head(self, status: int, headers: list[tuple[str, str]], req: Request) -> bytes:
        """The response head: ``headers``, then the ones the mode adds to every response."""
        headers = list(headers)
        if self.mode == "echo_auth_header":
            headers.append(("x-echo-auth", req.headers.get("authorization", "")))
        if self.mode == "connection_close":
            headers.append(("Connection", "close"))
        if self.mode in _KEEP_ALIVE:
            headers.append(("Keep-Alive", _KEEP_ALIVE[self.mode]))
        return response_head(status, headers)

    async def _json(
        self, conn: Conn, req: Request, status: int, obj: Any, extra: list[tuple[str, str]] | None = None
    ) -> bool:
        body = dumps(obj)
        head = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        await conn.send(self._head(status, head + (extra or []), req) + body)
        return self.mode != "connection_close"

    async def _route(self, conn: Conn, req: Request) -> bool:
        """Answer one request; False closes the connection."""
        if req.path in STREAM_PATHS and req.method == "POST":
            self._count("_requests_seen")
            return await self._stream(conn, req)
        if req.path == "/v1/models" and req.method == "GET":
            listing = {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "created": 0,
                        "owned_by": "hostile",
                        "max_model_len": 32768,
                    }
                ],
            }
            return await self._json(conn, req, 200, listing)
        return await self._json(
            conn,
            req,
            404,
            {"error": {"message": f"no route {req.method} {req.path}", "type": "NotFoundError", "code": 404}},
        )

    # ------------------------------------------------------------------ the stream and its faults
    async def _stream(self, conn: Conn, req: Request) -> bool:
        """A streaming request, as the mode has it: refused, answered with an error, or
        streamed (with the mode's fault on the way); False closes the connection."""
        conn.streams += 1
        if not self._accept_stream(conn):
            return False
        try:
            body = json.loads(req.body)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            return await self._json(conn, req, 400, {"error": {"message": f"bad JSON body: {exc}"}})
        auth = req.headers.get("authorization", "")
        if self.mode in ("http_500", "http_429", "echo_auth_body"):
            return await self._error_answer(conn, req, auth)
        if self.mode == "unknown_field_422" and "ignore_eos" in body:
            return await self._json(conn, req, 422, {"detail": UNKNOWN_FIELD})
        if self.mode == "image_too_large" and '"image_url"' in req.body.decode("utf-8", "replace"):
            err = {"message": IMAGE_TOO_LARGE, "type": "BadRequestError", "param": "messages", "code": 400}
            return await self._json(conn, req, 400, {"error": err})
        if req.path in POOLING_PATHS:
            return await self._pooling(conn, req, body)
        chat = req.path.endswith("/chat/completions")
        n = self.tokens if self.tokens is not None else min(int(body.get("max_tokens") or 4), 64)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-hostile-{self.requests_seen}"
        if self.mode == "echo_auth_header":
            rid += f"-{auth}"
        base = {
            "id": rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": str(body.get("model") or self.model),
        }
        prompt_tokens = len(json.dumps(body.get("messages") if chat else body.get("prompt")).split())
        if self.mode == "not_sse":
            return await self._json(conn, req, 200, full_completion(chat, base, n, prompt_tokens))
        if self.mode == "huge_event" and (self._huge is None or len(self._huge) != self.huge_bytes):
            self._huge = huge_text(self.huge_bytes)
        usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
        if req.path in HOSTED:  # the Responses or Messages shape, and its faults
            turns = body.get("messages") or body.get("input")
            events = HOSTED[req.path](self.mode, rid, n, len(json.dumps(turns).split()))
        else:
            events = stream_events(self.mode, chat, base, n, usage_on, prompt_tokens, self._huge)
        if not await self._send_stream(conn, req, rid, events):
            return False
        return await self._after_stream(conn)

    async def _pooling(self, conn: Conn, req: Request, body: dict) -> bool:
        """A pooling request's whole JSON answer, with the mode's fault (stall: head, silence)."""
        rid = f"pool-hostile-{self.requests_seen}"
        data = pooling_answer(self.mode, req.path, body, rid)
        head = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("x-request-id", rid),
        ]
        if self.mode == "stall":
            await conn.send(self._head(200, head, req))
            await hold_connection(conn)
            return False
        await conn.send(self._head(200, head, req) + data)
        return await self._after_stream(conn)

    def _accept_stream(self, conn: Conn) -> bool:
        """False when the mode closes on this request unanswered (``dies``, every second request
        of ``close_without_answer``); ``keepalive_limits`` counts a request past its limits."""
        mode = self.mode
        if mode == "dies" and self.requests_seen > self.die_after:
            self._count("_unanswered")
            self._dead = True
            self._kill_all()
            return False
        idle = time.monotonic() - conn.idle_since if conn.idle_since else 0.0
        if mode == "keepalive_limits" and (conn.streams > LIMIT_MAX or idle > LIMIT_TIMEOUT_S):
            self._count("_limit_violations")
        if mode == "close_without_answer" and conn.streams % 2 == 0:
            self._count("_unanswered")
            conn.writer.close()
            return False
        return True

    async def _error_answer(self, conn: Conn, req: Request, auth: str) -> bool:
        """The error modes' answer: a 500, a 429 with Retry-After, or a 401 echoing the key."""
        if self.mode == "echo_auth_body":
            message = f"invalid credentials: {auth!r} is not a valid key"
            return await self._json(
                conn, req, 401, {"error": {"message": message, "type": "AuthError", "code": 401}}
            )
        code = 500 if self.mode == "http_500" else 429
        extra = [("Retry-After", str(RETRY_AFTER_S))] if code == 429 else []
        err = {"message": ERROR_MESSAGES[code], "type": "HostileError", "code": code}
        return await self._json(conn, req, code, {"error": err}, extra)

    async def _send_stream(self, conn: Conn, req: Request, rid: str, events: list[bytes]) -> bool:
        """The 200 head and the events, chunked (``eof_body``: not), paced by ``itl_s``, with the
        mode's fault mid-stream; False when the fault ended it, True when it was sent whole."""
        mode = self.mode
        head = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("x-request-id", rid)]
        if mode != "eof_body":
            head.append(("Transfer-Encoding", "chunked"))
        if mode == "slow_headers":
            await asyncio.sleep(self.headers_delay_s)
        await conn.send(self._head(200, head, req))
        for i, ev in enumerate(events):
            if mode == "reset_mid_stream" and i == self.reset_after:
                await asyncio.sleep(0.05)  # let the client read what came before
                reset_connection(conn)
                return False
            if mode == "stall" and i == self.stall_after:
                await hold_connection(conn)
                return False
            if mode == "fin_mid_chunk" and i == self.reset_after:
                await conn.send(b"400\r\n" + ev[:20])  # a 1024-byte chunk, 20 bytes of it
                await asyncio.sleep(0.02)
                conn.writer.close()
                return False
            await conn.send(ev if mode == "eof_body" else chunk(ev))
            if self.itl_s > 0:
                await asyncio.sleep(self.itl_s)
        if mode != "eof_body":
            await conn.send(b"0\r\n\r\n")
        return True

    async def _after_stream(self, conn: Conn) -> bool:
        """A whole stream is counted; then the connection stays open, or the mode closes it."""
        self._count("_streams_finished")
        conn.idle_since = time.monotonic()
        if self.mode in ("eof_body", "connection_close"):
            conn.writer.close()
            return False
        if self.mode in ("close_after_response", "close_after_keepalive"):
            delay = self.close_delay_s if self.mode == "close_after_response" else 0.0
            if await fin_after(conn, delay):
                self._count("_unanswered")
            return False
        return True


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m loadgen.testing.hostile",
        description="A hostile OpenAI-style streaming server, one fault per mode.",
    )
    p.add_argument("mode", choices=MODES)
    a = p.parse_args(argv)
    with HostileServer(a.mode) as srv:
        print(json.dumps({"url": srv.url, "mode": a.mode}), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
