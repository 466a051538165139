"""Exact prompt lengths through the server's own tokenizer (``POST /tokenize``, vLLM and kin).

Without a local tokenizer, synthetic text is only approximately n tokens long, and peers that
decode ids to text and re-encode drift further (docs/peers.md, item 6). When the server offers
``/tokenize``, each text prompt is fitted before the run: count it with the server's tokenizer
(for chat, with the chat template applied, exactly as ``usage.prompt_tokens`` will count it),
then add or drop words at the end and count again, until the count is the target. The unique
opening of every prompt is never touched, so prefix caches still cannot flatter TTFT.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from loadgen.backends.transports.base import Transport
from loadgen.clock import now_ns, run_together, wait_for
from loadgen.records import RequestSpec
from loadgen.workload import Workload
from loadgen.workload.prompts import WORDS

_MAX_ROUNDS = 12
_KEEP_WORDS = 4  # the unique per-request opening (TextPrompts.prefix_words)
# Fitting runs before the load, with this many /tokenize calls in flight.
FIT_CONCURRENCY = 8


class _Collect:
    def __init__(self) -> None:
        self.status = 0
        self.parts: list[bytes] = []

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        self.status = status

    def feed(self, t_ns: int, data: bytes) -> bool:
        self.parts.append(data)
        return True

    def resent(self, t_ns: int, reason: str) -> None:
        self.status = 0
        self.parts.clear()


async def post_json(transport: Transport, path: str, obj: Any, timeout_s: float = 10.0) -> tuple[int, Any]:
    """POST a JSON body, return (status, parsed JSON or None)."""
    sink = _Collect()
    await wait_for(transport.post_stream(path, orjson.dumps(obj), sink), timeout_s)
    try:
        return sink.status, orjson.loads(b"".join(sink.parts))
    except orjson.JSONDecodeError:
        return sink.status, None


class ServerTokenizer:
    """Counts a request's prompt tokens the way the server will."""

    def __init__(self, transport: Transport, model: str, chat: bool) -> None:
        self.transport = transport
        self.model = model
        self.chat = chat
        self.calls = 0
        self.dialect = "openai"  # or "llamacpp", as ``available`` found it

    async def available(self) -> bool:
        """Whether the server offers /tokenize in a form known here: vLLM's and SGLang's
        (``{"model", "prompt"}`` -> ``{"count"}``), else llama.cpp's (``{"content"}`` ->
        ``{"tokens"}``, chat prompts through its ``/apply-template`` first)."""
        try:
            status, body = await post_json(
                self.transport, "/tokenize", {"model": self.model, "prompt": "hello world"}, 5.0
            )
            if status == 200 and isinstance(body, dict) and isinstance(body.get("count"), int):
                return True
            status, body = await post_json(self.transport, "/tokenize", {"content": "hello world"}, 5.0)
        except Exception:  # noqa: BLE001 - no /tokenize (or no answer) simply means "not offered"
            return False
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if status == 200 and isinstance(tokens, list) and tokens:
            self.dialect = "llamacpp"
            return True
        return False

    async def _count_llamacpp(self, prompt: str, messages: list[dict] | None) -> int:
        text = prompt
        if self.chat:
            status, body = await post_json(self.transport, "/apply-template", {"messages": messages})
            if status != 200 or not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
                raise RuntimeError(f"/apply-template answered HTTP {status}: {str(body)[:200]}")
            text = body["prompt"]
        req = {"content": text, "add_special": True, "parse_special": self.chat}
        status, body = await post_json(self.transport, "/tokenize", req)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
            raise RuntimeError(f"/tokenize answered HTTP {status}: {str(body)[:200]}")
        return len(body["tokens"])

    async def count(self, prompt: str, messages: list[dict] | None) -> int:
        self.calls += 1
        if self.dialect == "llamacpp":
            return await self._count_llamacpp(prompt, messages)
        if self.chat:
            req = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        else:
            req = {"model": self.model, "prompt": prompt}
        status, body = await post_json(self.transport, "/tokenize", req)
        if status != 200 or not isinstance(body, dict) or "count" not in body:
            raise RuntimeError(f"/tokenize answered HTTP {status}: {str(body)[:200]}")
        return int(body["count"])

    async def fit(self, spec: RequestSpec) -> RequestSpec:
        """``spec`` with its user text adjusted so the server counts ``spec.prompt_tokens``."""
        if not isinstance(spec.prompt, str):  # token ids: the server counts them as given
            return spec
        target = spec.prompt_tokens
        words = spec.prompt.split(" ")
        filler = _filler(spec.id)
        best: tuple[int, str, Any] | None = None
        for _ in range(_MAX_ROUNDS):
            text = " ".join(words)
            messages = _with_user(spec.messages, text)
            n = await self.count(text, messages)
            if best is None or abs(n - target) < abs(best[0] - target):
                best = (n, text, messages)
            diff = target - n
            if diff == 0:
                break
            # Big gaps close by halves (a word is usually one token, sometimes two), the last
            # few one word at a time.
            step = abs(diff) // 2 if abs(diff) > 3 else 1
            if diff > 0:
                words.extend(next(filler) for _ in range(step))
            else:
                step = min(step, len(words) - _KEEP_WORDS)
                if step <= 0:
                    break  # only the unique opening is left: the template alone exceeds the target
                del words[-step:]
        assert best is not None  # _MAX_ROUNDS >= 1: the first count always sets it
        n, text, messages = best
        # The prompt is now exactly what the server will count (or the closest reachable).
        return dataclasses.replace(spec, prompt=text, messages=messages, prompt_tokens=n)


def _with_user(messages: list[dict] | None, text: str) -> list[dict] | None:
    if messages is None:
        return None
    out = [dict(m) for m in messages]
    out[-1]["content"] = text
    return out


def _filler(seed: int) -> Iterator[str]:
    i = seed * 7919
    while True:
        yield WORDS[i % len(WORDS)]
        i += 1


class FittedSpecs:
    """The workload, with requests ``0..n-1`` replaced by their server-fitted versions."""

    def __init__(self, workload: Workload, fitted: dict[int, RequestSpec]) -> None:
        self.workload = workload
        self.fitted = fitted

    def request(self, i: int) -> RequestSpec:
        spec = self.fitted.get(i)
        return spec if spec is not None else self.workload.request(i)


async def fit_prompts(
    tokenizer: ServerTokenizer, workload: Workload, n: int, budget_s: float | None = None
) -> tuple[FittedSpecs, dict]:
    """Fit requests ``0..n-1`` (``FIT_CONCURRENCY`` at a time), or those begun within
    ``budget_s`` seconds, in order, so the fitted ones are always ``0..k-1``; return the spec
    source and what happened (for the conditions)."""
    deadline = None if budget_s is None else now_ns() + int(budget_s * 1e9)
    ids = iter(range(n))
    fitted: dict[int, Any] = {}

    async def fitter() -> None:
        while deadline is None or now_ns() < deadline:
            i = next(ids, None)
            if i is None:
                return
            spec = await tokenizer.fit(workload.request(i))
            fitted[i] = spec

    await run_together(fitter() for _ in range(FIT_CONCURRENCY))
    k = len(fitted)
    exact = sum(1 for i, s in fitted.items() if s.prompt_tokens == workload.request(i).prompt_tokens)
    info = {
        "method": "server /tokenize" + (" (llama.cpp)" if tokenizer.dialect == "llamacpp" else ""),
        "requests_fitted": k,
        "exact": exact,
        "tokenize_calls": tokenizer.calls,
    }
    if k < n:
        info["budget_s"] = budget_s
    return FittedSpecs(workload, fitted), info
