"""What the scripted test server's protocols share: its ground-truth log, SSE framing, pacing
that never sends early, a connection reset as a crashing server does it, and the answers of its
``answer: "solve"`` mode.

Like the simulator, the test server imports nothing from the client side, so a bug shared
between an encoder and a decoder cannot hide itself.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import struct
import subprocess
import time
import zlib
from typing import Any

WORDS = ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta")


class Log:
    """Per response id: when the server received it and wrote each event (perf_counter_ns)."""

    def __init__(self) -> None:
        self.entries: dict[str, dict] = {}

    def open(self, rid: str, recv_ns: int, request: Any, prompt_tokens: int) -> dict[str, Any]:
        """The entry of a response about to stream: when it was received, from which client
        port, and the lists its events are logged into."""
        peer = request.transport.get_extra_info("peername") if request.transport else None
        entry: dict[str, Any] = {
            "id": rid,
            "recv_ns": recv_ns,
            "peer_port": peer[1] if peer else None,
            "chunk_ns": [],
            "chunk_tokens": [],
            "first_token_ns": None,
            "end_ns": None,
            "prompt_tokens": prompt_tokens,
        }
        self.entries[rid] = entry
        return entry


def scripted(defaults: dict, body: dict, counter: Any) -> tuple[dict, int]:
    """A request's script over the server's defaults, and its number in the count of requests
    the server received (every protocol shares one): ``fail_every: n`` keeps the script's
    ``fail`` for every n-th request only."""
    cfg = dict(defaults)
    cfg.update(body.get("loadgen_test") or {})
    n = next(counter)
    if cfg.get("fail_every") and n % int(cfg["fail_every"]) != 0:
        cfg["fail"] = ""
    return cfg, n


def event(obj: dict) -> bytes:
    """One SSE event carrying ``obj`` as compact JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def reset_connection(request: Any) -> None:
    """Abort the request's TCP connection with a reset (RST), as a crashing server would."""
    sock = request.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    request.transport.abort()


async def end_stream(resp: Any, entry: dict, data: bytes = b"") -> Any:
    """Write ``data`` (a last event, a fault's bytes), stamp the log entry's end and close the
    stream: how every scripted stream ends, so the log's ``end_ns`` means the same in each."""
    if data:
        await resp.write(data)
    entry["end_ns"] = time.perf_counter_ns()
    await resp.write_eof()
    return resp


async def pace_until(deadline_ns: int) -> None:
    """Sleep until ``deadline_ns`` (perf_counter_ns), never before it: event-loop timers can
    fire a little early, and a token sent early would make a client look faster than it is."""
    delay = deadline_ns - time.perf_counter_ns()
    if delay > 0:
        await asyncio.sleep(delay / 1e9)
    while time.perf_counter_ns() < deadline_ns:
        await asyncio.sleep(0)


# --- answer mode -------------------------------------------------------------------------------
# The server reads the built-in quality tasks' wording (loadgen/quality/tasks.py) with its own
# patterns rather than importing that module: the client's task generator is under test here.
_ARITHMETIC = re.compile(r"What is (\d+) ([-+x*]) (\d+)\?")
_COPY = re.compile(r"Repeat the following words exactly, nothing else:(.*)")
_FACT = re.compile(r"^\s*(\w+): (\S+)\s*$", re.MULTILINE)
_ASK = re.compile(r"What is the value for (\w+)\?")


def prompt_text(body: dict, chat: bool) -> str:
    """The text an answer responds to: the last user message's content (its text parts, when it
    is a list of parts) for chat, the prompt string for completions (token ids as their JSON)."""
    if not chat:
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else json.dumps(prompt)
    for m in reversed(body.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else ""
    return ""


def media_received(messages: Any) -> dict[str, int]:
    """What a chat request's content parts carried, as the server decoded it: images, audio
    clips, and the bytes of the media sent inline (base64 decoded; a URL adds a count only)."""
    got = {"images": 0, "audio_clips": 0, "media_bytes": 0}
    for m in messages if isinstance(messages, list) else []:
        parts = m.get("content") if isinstance(m, dict) else None
        for p in parts if isinstance(parts, list) else []:
            kind = p.get("type") if isinstance(p, dict) else None
            if kind == "image_url":
                got["images"] += 1
                url = str((p.get("image_url") or {}).get("url", ""))
                if url.startswith("data:"):
                    got["media_bytes"] += len(base64.b64decode(url.partition(",")[2]))
            elif kind == "input_audio":
                got["audio_clips"] += 1
                got["media_bytes"] += len(base64.b64decode((p.get("input_audio") or {}).get("data", "")))
            elif kind == "audio_url":
                got["audio_clips"] += 1
    return got


def solve(text: str) -> str | None:
    """The right answer to a built-in task's prompt, or None for a prompt it does not know."""
    m = _ARITHMETIC.search(text)
    if m:
        a, op, b = int(m[1]), m[2], int(m[3])
        return str(a + b if op == "+" else a - b if op == "-" else a * b)
    m = _COPY.search(text)
    if m and m[1].split():
        return " ".join(m[1].split())
    m = _ASK.search(text)
    if m:
        facts = dict(_FACT.findall(text))
        return facts.get(m[1])
    return None


def wrong(answer: str) -> str:
    """A wrong answer close to the right one: a number off by one, else the first word changed."""
    try:
        return str(int(answer) + 1)
    except ValueError:
        words = answer.split(" ")
        words[0] = "alpha" if words[0] != "alpha" else "beta"
        return " ".join(words)


def answer_pieces(text: str, wrong_mod: int, n_unknown: int) -> tuple[list[str], bool]:
    """The answer to ``text`` as word tokens, each with its leading space as BPE has it
    (``["apple", " river"]``), and whether it is a solved task (it then ends with "stop"). A
    prompt it does not know gets ``n_unknown`` words seeded by its crc32: the same prompt, the
    same words. With ``wrong_mod`` n, prompts whose crc32 % n == 0 get ``wrong`` answers."""
    crc = zlib.crc32(text.encode("utf-8"))
    answer = solve(text)
    solved = answer is not None
    if answer is None:
        x, words = crc, []
        for _ in range(n_unknown):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF  # an LCG: fixed across Python versions
            words.append(WORDS[(x >> 16) % len(WORDS)])
        answer = " ".join(words)
    if wrong_mod and crc % wrong_mod == 0 and answer:
        answer = wrong(answer)
    if not answer:
        return [], solved
    first, *rest = answer.split(" ")
    return [first] + [" " + w for w in rest], solved


def end_process(proc: subprocess.Popen[str]) -> None:
    """Stop a scripted server's process: SIGTERM, SIGKILL after 5 s, its pipes closed."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
