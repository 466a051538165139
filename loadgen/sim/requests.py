"""Turning an OpenAI request body into the simulator's per-request state, and its log line.

Validation follows vLLM where it matters to a load generator: a prompt plus ``max_tokens``
beyond ``max_model_len`` is a 400 with an OpenAI-style error; an unknown ``model`` is a 404;
``max_tokens`` defaults to what is left of the context. Without ``ignore_eos`` the output stops
at a seeded pseudo-EOS (geometric, mean ``eos_mean_tokens``), never before ``min_tokens`` and
never after ``max_tokens``; with it, exactly ``max_tokens`` tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

import orjson

from . import answers
from .config import SimConfig
from .hosted_sse import MessagesEncoder, ResponsesEncoder, as_chat
from .media import MediaError, MediaRule, MediaSeen
from .native_sse import SGLangEncoder, TritonEncoder
from .prefix_cache import block_hashes
from .sse import ChunkEncoder, ToolCallEncoder
from .structured import asked_schema, broken, json_pieces, min_pieces, tool_to_call
from .text import EMPTY_PROMPT_TOKENS, WORDS_JSON, WordStream, chat_tokens, text_tokens

if TYPE_CHECKING:
    import asyncio

    from .engine import Seq


class BadRequest(Exception):
    def __init__(
        self, message: str, status: int = 400, kind: str = "BadRequestError", param: str | None = None
    ):
        super().__init__(message)
        self.message, self.status, self.kind, self.param = message, status, kind, param


class StreamEncoder(Protocol):
    """What the pacer asks of a protocol's encoder: the opening bytes, one token's, the end's.
    The SSE encoders (``sse.py``, ``hosted_sse.py``) and Triton's gRPC one (``grpc_frontend.py``)."""

    n_reason: int

    def start(self) -> bytes: ...
    def token(self, word_json: bytes, completion_tokens: int, finish_reason: bytes = b"null") -> bytes: ...
    def end(self, completion_tokens: int, include_usage: bool, finish_reason: str = "length") -> bytes: ...


class StreamWriter(Protocol):
    """Where a stream's bytes go: an HTTP response, or one gRPC call (one message a write)."""

    async def write(self, data: bytes) -> Any: ...


class RequestState:
    """What the server keeps per request: stream settings, encoder, timestamps (wall, ns)."""

    __slots__ = (
        "rid",
        "endpoint",
        "chat",
        "stream",
        "include_usage",
        "created",
        "model",
        "adapter",
        "prompt_tokens",
        "max_tokens",
        "output_tokens",
        "finish_reason",
        "finish_json",
        "words",
        "pieces",
        "tool_name",
        "json_valid",
        "block_hashes",
        "items",
        "base64",
        "encoder",
        "response",
        "seq",
        "done",
        "arrival_ns",
        "admitted_ns",
        "prefill_end_ns",
        "chunk_ns",
        "chunk_tokens",
        "finish_ns",
        "media",
    )

    def __init__(
        self,
        rid: str,
        chat: bool,
        stream: bool,
        include_usage: bool,
        continuous: bool,
        created: int,
        model: str,
        prompt_tokens: int,
        max_tokens: int,
        output_tokens: int,
        words: WordStream,
    ):
        self.rid, self.chat, self.stream = rid, chat, stream
        self.endpoint = "chat" if chat else "completions"
        self.include_usage = include_usage
        self.created, self.model = created, model
        self.adapter: str | None = None  # the LoRA adapter asked for; None: the base model
        self.prompt_tokens, self.max_tokens, self.output_tokens = prompt_tokens, max_tokens, output_tokens
        self.finish_reason = "length" if output_tokens >= max_tokens else "stop"
        self.finish_json = orjson.dumps(self.finish_reason)
        self.words = words
        # An agent's answer (structured.py): its tokens' JSON strings, the function it calls, and
        # whether its JSON is valid against the asked schema (None: no schema was asked).
        self.pieces: tuple[bytes, ...] | None = None
        self.tool_name: str | None = None
        self.json_valid: bool | None = None
        self.block_hashes: Sequence[int] = ()  # of the prompt's full blocks, when caching is on
        self.items: list[bytes] | None = None  # a pooling request's inputs (pooling.py); None: a prompt
        self.base64 = False  # an embeddings answer's vectors as base64 float32 (encoding_format)
        self.encoder: StreamEncoder | None = (
            ChunkEncoder(rid, created, model, chat, prompt_tokens, continuous) if stream else None
        )
        self.response: StreamWriter | None = None
        self.seq: Seq | None = None
        self.done: asyncio.Future[None] | None = None
        self.arrival_ns = self.admitted_ns = self.prefill_end_ns = self.finish_ns = 0
        self.chunk_ns: list[int] = []
        self.chunk_tokens: list[int] = []  # a streamed event's tokens (> 1: accepted drafts)
        self.media: MediaSeen | None = None  # a chat prompt's images and audio, when it had any

    def usage(self, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }

    def word(self, k: int) -> bytes:
        """Token ``k``'s JSON string (from 0): the answer's piece, else the word stream's."""
        pieces = self.pieces
        return pieces[k] if pieces is not None else WORDS_JSON[self.words.index(k)]

    def answer_text(self, n: int) -> str:
        """The text of the first ``n`` tokens (a tool call's: its arguments)."""
        if self.pieces is None:
            return self.words.text(n)
        return "".join(orjson.loads(p) for p in self.pieces[1 if self.tool_name else 0 : n])

    def set_pieces(self, pieces: list[str], finish_reason: str) -> None:
        self.pieces = tuple(orjson.dumps(p) for p in pieces)
        self.finish_reason = finish_reason
        self.finish_json = orjson.dumps(finish_reason)

    def full_body(self, text: str, completion: int) -> dict[str, Any]:
        """The non-streaming response (a native protocol's encoder, kept for it, gives its own)."""
        if isinstance(self.encoder, (TritonEncoder, SGLangEncoder)):
            ids = [self.words.index(i) for i in range(completion)]
            return self.encoder.answer(text, ids, self.finish_reason)
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.tool_name is not None:
                call = {"name": self.tool_name, "arguments": text}
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": f"call_{self.rid}", "type": "function", "function": call}],
                }
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": self.finish_reason,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": self.finish_reason,
                "stop_reason": None,
            }
        return {
            "id": self.rid,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(completion),
        }

    def ground_truth(self, output_tokens: int) -> dict[str, Any]:
        """One line of the ground-truth log (every ``_ns`` is perf_counter_ns in the server)."""
        chunks = self.chunk_ns
        first = (chunks[0] if self.stream else self.prefill_end_ns) if chunks else 0
        n = output_tokens if self.items is None else 0  # a pooling answer generates nothing
        tpot = None
        if self.stream and n >= 2 and len(chunks) >= 2:
            tpot = (chunks[-1] - chunks[0]) / (n - 1) / 1e6
        admitted = self.admitted_ns
        return {
            "id": self.rid,
            "endpoint": self.endpoint,
            "model": self.model,
            "stream": self.stream,
            "arrival_ns": self.arrival_ns,
            "admitted_ns": admitted,
            "prefill_end_ns": self.prefill_end_ns,
            "first_token_ns": first,
            "chunk_ns": chunks,
            "chunk_tokens": list(self.chunk_tokens) if self.stream else [n] * len(chunks),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.seq.cached_tokens if self.seq else 0,
            "output_tokens": n,
            "reasoning_tokens": min(self.encoder.n_reason, n) if self.encoder else 0,
            "items": None if self.items is None else len(self.items),
            "max_tokens": self.max_tokens,
            "finish_ns": self.finish_ns,
            "finish_reason": self.finish_reason,
            "tool_call": self.tool_name,
            "json_valid": self.json_valid,
            "queue_ms": (admitted - self.arrival_ns) / 1e6 if admitted else None,
            "ttft_ms": (first - self.arrival_ns) / 1e6 if first else None,
            "tpot_ms": tpot,
            **(self.media.log() if self.media is not None else {}),
        }


@overload
def _int(body: dict, key: str, default: int, lo: int) -> int: ...
@overload
def _int(body: dict, key: str, default: None, lo: int) -> int | None: ...
def _int(body: dict, key: str, default: int | None, lo: int) -> int | None:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise BadRequest(f"{key} must be an integer >= {lo}, got {v!r}", param=key)
    return v


def _prompt(body: dict, chat: bool, seen: MediaSeen, config: SimConfig) -> tuple[Sequence[Hashable], bytes]:
    """(prompt token identities, bytes that seed the output text); text.py has the rules, and
    media.py those of the images and audio ``seen`` counts."""
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise BadRequest("messages must be a non-empty list of objects", param="messages")
        rule = MediaRule(config) if any(isinstance(m.get("content"), list) for m in msgs) else None
        try:
            tokens = chat_tokens(msgs, None if rule is None else lambda p: rule.tokens(p, seen))
        except MediaError as exc:
            raise BadRequest(str(exc), param="messages") from None
        # The text seeds the answer's words: a megabyte of base64 need not be serialised again.
        return tokens, orjson.dumps(msgs if rule is None else [_text_of(m) for m in msgs])
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        return text_tokens(p), p.encode()
    if isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return p, orjson.dumps(p)
    raise BadRequest(
        "prompt must be a string, a list of token ids, or a batch of one of them"
        " (the simulator serves one prompt per request)",
        param="prompt",
    )


def _text_of(message: dict) -> Any:
    """A message's content without its media (which may be megabytes of base64)."""
    content = message.get("content")
    if isinstance(content, list):
        return [p.get("text") for p in content if isinstance(p, dict) and "text" in p]
    return content


def parse_request(body: Any, chat: bool, config: SimConfig, rid: str, created: int) -> RequestState:
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = config.served_model_name
    asked = body.get("model")
    if asked not in (None, model) and asked not in config.lora_adapters:
        raise BadRequest(f"The model `{asked}` does not exist.", 404, "NotFoundError", "model")
    if body.get("n", 1) != 1:
        raise BadRequest("the simulator supports n=1 only", param="n")
    seen = MediaSeen()
    tokens, key = _prompt(body, chat, seen, config)
    tokens = tokens or EMPTY_PROMPT_TOKENS  # an empty prompt still holds a begin-of-text token
    prompt_tokens = len(tokens)  # = count_text / count_chat / len(ids): one rule, two views
    limit = config.context_len
    max_tokens = _int(body, "max_tokens", None, 1)
    if chat and max_tokens is None:
        max_tokens = _int(body, "max_completion_tokens", None, 1)
    if max_tokens is None:
        max_tokens = limit - prompt_tokens
    if prompt_tokens + max_tokens > limit or max_tokens < 1:
        raise BadRequest(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
            f"{'messages' if chat else 'prompt'}, {max_tokens} for the completion). "
            "Please reduce the length of the messages or completion.",
            param="messages" if chat else "prompt",
        )
    min_tokens = _int(body, "min_tokens", 0, 0)
    if min_tokens > max_tokens:
        raise BadRequest(
            f"min_tokens ({min_tokens}) must be <= max_tokens ({max_tokens})", param="min_tokens"
        )
    words = WordStream(config.seed, key)
    if body.get("ignore_eos"):
        out = max_tokens
    else:
        out = min(max_tokens, max(min_tokens, words.eos_length(config.eos_mean_tokens)))
    stream = bool(body.get("stream"))
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest("stream_options must be an object", param="stream_options")
    include_usage = stream and bool(opts.get("include_usage"))
    continuous = include_usage and bool(opts.get("continuous_usage_stats"))  # as vLLM
    adapter = asked if asked in config.lora_adapters else None
    state = RequestState(
        rid,
        chat,
        stream,
        include_usage,
        continuous,
        created,
        adapter or model,
        prompt_tokens,
        max_tokens,
        out,
        words,
    )
    state.adapter = adapter
    state.media = seen if seen.images or seen.audio_clips else None
    if state.encoder is not None and chat:
        state.encoder.n_reason = min(config.reasoning_tokens, out)
    if chat:
        _agent_answer(state, body, config, continuous)
    task = (
        None
        if state.pieces is not None
        else answers.task_answer(body, chat, config, words, max_tokens, min_tokens)
    )
    if task is not None:  # a built-in quality task's answer (answers.py), with no reasoning before it
        state.output_tokens = len(task)
        state.set_pieces(task, "length" if len(task) >= max_tokens else "stop")
        if isinstance(state.encoder, ChunkEncoder):
            state.encoder.n_reason = 0
    # Hashed here, in the handler, not in the engine loop that paces every stream.
    if config.prefix_caching:
        state.block_hashes = block_hashes(tokens, config.block_size)
    return state


def _agent_answer(state: RequestState, body: dict[str, Any], config: SimConfig, continuous: bool) -> None:
    """A tool call or a structured answer, when the request asks for one (no reasoning then).
    Its output is at least the JSON's fewest tokens (no EOS inside a value), at most max_tokens."""
    rng = state.words.rng
    choice = body.get("tool_choice")
    fn = tool_to_call(body, rng, config.tool_call_rate)
    if fn is None and isinstance(choice, dict) and body.get("tools"):
        raise BadRequest(f"tool_choice names no tool of the request: {choice!r}", param="tool_choice")
    if fn is not None:
        name = str(fn.get("name") or "")
        params = fn.get("parameters") or {"type": "object"}
        out = state.output_tokens = min(max(state.output_tokens, 1 + min_pieces(params)), state.max_tokens)
        args, complete = json_pieces(params, out - 1, rng)
        state.tool_name = name
        state.set_pieces([name, *args], "tool_calls" if complete else "length")
        if state.stream:
            state.encoder = ToolCallEncoder(
                state.rid, state.created, state.model, state.prompt_tokens, name, continuous
            )
        return
    schema = asked_schema(body)
    if schema is None:
        return
    out = state.output_tokens = min(max(state.output_tokens, min_pieces(schema)), state.max_tokens)
    pieces, complete = json_pieces(schema, out, rng)
    state.json_valid = complete
    if complete and config.json_invalid_rate and rng.random() < config.json_invalid_rate:
        pieces, state.json_valid = broken(pieces), False
    state.set_pieces(pieces, "stop" if complete else "length")
    if isinstance(state.encoder, ChunkEncoder):
        state.encoder.n_reason = 0


_HOSTED: dict[str, type[ResponsesEncoder | MessagesEncoder]] = {
    "responses": ResponsesEncoder,
    "messages": MessagesEncoder,
}


def parse_hosted(body: Any, endpoint: str, config: SimConfig, rid: str, created: int) -> RequestState:
    """A Responses or Messages request: read as the chat request of the same turns (so its
    prompt counts and its words are chat's), streamed with its own protocol's encoder."""
    if not isinstance(body, dict) or not body.get("stream"):
        raise BadRequest(
            f"the simulator serves /v1/{endpoint} streamed only; send stream: true", param="stream"
        )
    state = parse_request(as_chat(body, endpoint), True, config, rid, created)
    state.endpoint = endpoint
    n_reason = min(config.reasoning_tokens, state.output_tokens)
    state.encoder = _HOSTED[endpoint](rid, created, state.model, state.prompt_tokens, n_reason)
    return state
