"""The scripted test server's OpenAI stream (chat and completions), in steps: what the request
and its ``loadgen_test`` script ask for (``plan``), then the events, paced and logged, with the
script's fault injected where it asks (``stream``). ``server.py`` routes requests here.

Like the simulator, this module imports nothing from the client side, so a bug shared between
an encoder and a decoder cannot hide itself.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadgen.testing.common import (
    WORDS,
    Log,
    answer_pieces,
    end_stream,
    event,
    media_received,
    pace_until,
    prompt_text,
    reset_connection,
)

Chunk = Callable[..., bytes]  # (choice, usage=None) -> one SSE event of this response


@dataclass
class Plan:
    """What one request's stream will be, decided before its first byte."""

    chat: bool
    n_out: int  # tokens to send
    usage_on: bool  # a final usage event (stream_options.include_usage)
    continuous: bool  # usage on every event (vLLM's continuous_usage_stats)
    fail_kind: str  # the script's fault, "" for none
    fail_n: int  # the event index the fault strikes at
    prompt_tokens: int
    n_reason: int  # the first n tokens go out as reasoning_content
    script: list[str] | None  # answer mode: every token's text
    finish: str  # the finish reason
    tool: str | None = None  # tool_call mode: the function the answer calls (chat)

    def usage(self, sent: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": sent,
            "total_tokens": self.prompt_tokens + sent,
        }


def plan(request: Any, body: dict, cfg: dict) -> Plan | Any:
    """The stream ``body`` and ``cfg`` (defaults under the request's script) ask for, or the whole
    response when there is no stream: a scripted HTTP status, or a script that cannot be used."""
    from aiohttp import web

    chat = request.path.endswith("/chat/completions")
    n_out = int(body.get("max_tokens") or cfg["default_tokens"])
    opts = body.get("stream_options") or {}
    fail_kind, _, fail_arg = (cfg.get("fail") or "").partition(":")
    prompt = body.get("messages") if chat else body.get("prompt")
    if chat and cfg.get("tokenizer_dir"):
        prompt_tokens = templated_token_count(prompt, str(cfg["tokenizer_dir"]))
    elif cfg.get("tokenize"):
        prompt_tokens = toy_token_count(prompt, chat)
    else:
        prompt_tokens = (
            len(prompt) if isinstance(prompt, list) and not chat else len(json.dumps(prompt).split())
        )
    if fail_kind == "status":
        code = int(fail_arg or 500)
        return web.json_response({"error": {"message": f"scripted HTTP {code}", "code": code}}, status=code)
    p = Plan(
        chat=chat,
        n_out=n_out,
        usage_on=bool(opts.get("include_usage")),
        continuous=bool(opts.get("continuous_usage_stats")),
        fail_kind=fail_kind,
        fail_n=int(fail_arg) if fail_arg.isdigit() else 0,
        prompt_tokens=prompt_tokens,
        n_reason=int(cfg.get("reasoning_tokens", 0)),
        script=None,
        finish="length",
    )
    if cfg.get("answer") is not None:
        if cfg["answer"] != "solve":
            msg = f"unknown loadgen_test.answer {cfg['answer']!r}; valid: solve"
            return web.json_response({"error": {"message": msg, "code": 400}}, status=400)
        p.script, p.n_out, p.finish = answer_script(body, cfg, chat, p.n_reason)
    elif chat and cfg.get("tool_call") and not _answers_a_tool(body):
        p.tool, p.script, p.finish = str(cfg["tool_call"]), tool_script(p.n_out), "tool_calls"
    return p


def _answers_a_tool(body: dict) -> bool:
    """Whether the request's last message is a tool's result (answered in text, not a call)."""
    msgs = body.get("messages") or []
    return bool(msgs) and isinstance(msgs[-1], dict) and msgs[-1].get("role") == "tool"


def tool_script(n: int) -> list[str]:
    """A tool call's tokens: the name's (empty arguments), then ``{"q": "`` + words + ``"}`` in
    pieces, ``n`` in all (from 3 tokens a whole JSON object)."""
    words = [" " + WORDS[j % len(WORDS)] for j in range(max(n - 3, 0))]
    return ["", '{"q": "', *words, '"}'][:n]


async def stream(request: Any, body: dict, cfg: dict, log: Log, rid: str, recv_ns: int) -> Any:
    """Answer one chat or completions request as its script says, logging every event's send
    time and the content text really sent (however the stream ends)."""
    from aiohttp import web

    p = plan(request, body, cfg)
    if not isinstance(p, Plan):
        return p
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "x-request-id": rid})
    await resp.prepare(request)
    entry = log.open(rid, recv_ns, request, p.prompt_tokens)
    entry["answer"] = ""
    if cfg.get("log_bodies"):  # the request's bytes as received, for a byte-for-byte comparison
        entry["body_b64"] = base64.b64encode(await request.read()).decode()
    # What was asked, as received: a test checks a multi-turn history against it.
    entry["messages" if p.chat else "prompt"] = body.get("messages" if p.chat else "prompt")
    if p.chat:  # the media the request carried, counted and decoded here (a test compares them)
        entry["media"] = media_received(body.get("messages"))
        if entry["media"]["images"] or entry["media"]["audio_clips"]:  # the log keeps no base64
            entry["messages"] = [
                {**m, "content": prompt_text({"messages": [m]}, True)} for m in body["messages"]
            ]
    content: list[str] = []  # the content text as sent, logged however the stream ends
    try:
        if p.fail_kind == "garbage":
            await resp.write(b"this is not an event stream\n\n")
            await resp.write_eof()
            return resp
        chunk = _chunker(rid, body, p.chat)
        if p.chat and cfg.get("role_first", True):
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            await resp.write(
                chunk(
                    role, {"prompt_tokens": p.prompt_tokens, "completion_tokens": 0} if p.continuous else None
                )
            )
        sent = await _tokens(request, resp, p, cfg, chunk, entry, content, rid, recv_ns)
        if sent is None:  # the script's fault ended the stream
            return resp
        await _finish(resp, p, chunk, sent)
        return await end_stream(resp, entry)
    finally:
        entry["answer"] = "".join(content)


def _chunker(rid: str, body: dict, chat: bool) -> Chunk:
    """The event writer of one response: its id, object, creation time and model on every event."""
    base = {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": body.get("model", "test"),
    }

    def chunk(choice: dict, usage: dict | None = None) -> bytes:
        d = dict(base, choices=[choice] if choice else [])
        if usage is not None:
            d["usage"] = usage
        return event(d)

    return chunk


async def _tokens(
    request: Any,
    resp: Any,
    p: Plan,
    cfg: dict,
    chunk: Chunk,
    entry: dict,
    content: list[str],
    rid: str,
    recv_ns: int,
) -> int | None:
    """The token events, each sent at its deadline (first at ttft_ms, then every itl_ms) and
    logged as it goes to the socket; how many tokens were sent, or None when a fault ended it."""
    tpc = cfg.get("tokens_per_chunk", 1)
    pattern = itertools.cycle(tpc if isinstance(tpc, list) else [tpc])
    start = recv_ns + int(cfg["ttft_ms"] * 1e6)
    itl_ns = int(cfg["itl_ms"] * 1e6)
    sent = 0
    k = 0
    while sent < p.n_out:
        if k == p.fail_n and await _fault(request, resp, p, entry, content, rid):
            return None
        n = min(next(pattern), p.n_out - sent)
        await pace_until(start + k * itl_ns)
        if p.script is not None:
            text = "".join(p.script[sent : sent + n])
        else:
            text = "".join(" " + WORDS[(sent + j) % len(WORDS)] for j in range(n))
        key = "reasoning_content" if sent < p.n_reason else "content"
        if p.tool is not None:  # the first token names the call, the rest are its arguments
            key = "tool_calls"
            fn = {"name": p.tool, "arguments": ""} if sent == 0 else {"arguments": text}
            call = {
                "index": 0,
                "function": fn,
                **({"id": f"call_{rid}", "type": "function"} if sent == 0 else {}),
            }
            choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
        elif p.chat:
            choice = {"index": 0, "delta": {key: text}, "finish_reason": None}
        else:
            choice = {"index": 0, "text": text, "finish_reason": None}
        sent += n
        data = chunk(choice, p.usage(sent) if p.continuous else None)
        # Stamped just before the bytes go to the socket: the client's timestamp of the same
        # event can only be later, and the difference is the client's whole receive path.
        t = time.perf_counter_ns()
        await resp.write(data)
        entry["chunk_ns"].append(t)
        entry["chunk_tokens"].append(n)
        if key == "content":
            content.append(text)
        elif key == "tool_calls":
            entry["tool_call"] = p.tool
        if entry["first_token_ns"] is None:
            entry["first_token_ns"] = t
        k += 1
    return sent


async def _fault(request: Any, resp: Any, p: Plan, entry: dict, content: list[str], rid: str) -> bool:
    """The script's fault at its event index; True when it ended the stream (a stall never
    returns: the client's timeout or cancel ends it)."""
    if p.fail_kind == "reset_after":
        reset_connection(request)
        entry["end_ns"] = time.perf_counter_ns()
        return True
    if p.fail_kind == "stall_after":
        entry["answer"] = "".join(content)
        await asyncio.sleep(3600)
        return False
    if p.fail_kind == "malformed_after":
        await resp.write(b'data: {"id": "' + rid.encode() + b'", "choices": [{"delta": {"conte\n\n')
    elif p.fail_kind == "error_event_after":
        await resp.write(event({"error": {"message": "scripted in-stream error", "code": 500}}))
    else:
        return False
    await end_stream(resp, entry)
    return True


async def _finish(resp: Any, p: Plan, chunk: Chunk, sent: int) -> None:
    """The end of a whole stream: the finish reason, the usage event if asked, then [DONE]
    (which the ``no_done`` fault leaves out)."""
    final: dict[str, Any] = {"index": 0, "finish_reason": p.finish}
    if p.chat:
        final["delta"] = {}
    else:
        final["text"] = ""
    await resp.write(chunk(final))
    if p.usage_on:
        await resp.write(chunk({}, p.usage(sent)))
    if p.fail_kind != "no_done":
        await resp.write(b"data: [DONE]\n\n")


def answer_script(body: dict, cfg: dict, chat: bool, n_reason: int) -> tuple[list[str], int, str]:
    """Answer mode: every token's text (``n_reason`` filler words, then the answer's words), how
    many of them to send (max_tokens caps it) and the finish reason ("stop" for a whole answer
    to a task it solved, else "length")."""
    cap = int(body["max_tokens"]) if body.get("max_tokens") else None
    n_unknown = max((cap or int(cfg["default_tokens"])) - n_reason, 0)
    pieces, solved = answer_pieces(prompt_text(body, chat), int(cfg.get("wrong_mod") or 0), n_unknown)
    script = [" " + WORDS[j % len(WORDS)] for j in range(n_reason)] + pieces
    n_out = len(script) if cap is None else min(cap, len(script))
    return script, n_out, "stop" if solved and n_out == len(script) else "length"


_TEMPLATED: dict[str, tuple[Any, Any, dict[str, str]]] = {}


def templated_token_count(messages: Any, folder: str) -> int:
    """A chat request's prompt tokens as a real server counts them (vLLM, ``transformers
    serve``): the messages rendered through the chat template of the model folder
    (``tokenizer_config.json``'s ``chat_template``, its special tokens by name, the assistant's
    turn opened), then encoded with its ``tokenizer.json`` adding no special tokens (the
    template writes its own BOS). Needs ``tokenizers`` and ``jinja2``."""
    if folder not in _TEMPLATED:
        import jinja2
        from tokenizers import Tokenizer

        with open(f"{folder}/tokenizer_config.json", encoding="utf-8") as f:
            config = json.load(f)
        special = {}
        for name in ("bos_token", "eos_token"):
            v = config.get(name)
            v = v.get("content") if isinstance(v, dict) else v
            if isinstance(v, str):
                special[name] = v
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        template = env.from_string(config["chat_template"])
        _TEMPLATED[folder] = (Tokenizer.from_file(f"{folder}/tokenizer.json"), template, special)
    tok, template, special = _TEMPLATED[folder]

    def text(content: Any) -> str:  # content parts: their text (media count nothing here)
        if isinstance(content, list):
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""

    plain = [{**m, "content": text(m.get("content"))} for m in messages]
    text = template.render(messages=plain, add_generation_prompt=True, **special)
    return len(tok.encode(text, add_special_tokens=False).ids)


def toy_token_count(prompt: Any, chat: bool) -> int:
    """The test server's own tokenizer (served at /tokenize when ``tokenize`` is on): a word of
    up to 6 letters is one token, longer words more; completions add a BOS token, chat a
    template of 3 tokens per message plus 2. Deliberately unlike one-word-one-token."""

    def words(text: str) -> int:
        return sum(1 + len(w) // 7 for w in text.split())

    def text(content: Any) -> str:
        if isinstance(content, list):  # content parts: their text (media count nothing here)
            return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return content or ""

    if chat:
        return sum(3 + words(text(m.get("content"))) for m in prompt) + 2
    if isinstance(prompt, list):
        return len(prompt) + 1
    return words(prompt) + 1
