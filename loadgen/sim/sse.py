"""The simulator's own SSE encoder for OpenAI-style streams (shares no code with the client).

Each request gets one ``ChunkEncoder``; the per-token path splices a pre-encoded word into
pre-built byte strings, so a token costs a few bytes concatenations and no JSON encoding.

Stream shape, as vLLM sends it:
- chat: a role-only chunk ``{"delta": {"role": "assistant", "content": ""}}`` first (sent when
  the request is accepted, before any token: a client must not take it for the first token),
  then one chunk per token; the last token's chunk carries ``finish_reason``;
- completions: one chunk per token, the last with ``finish_reason``;
- then, with ``stream_options.include_usage``, a usage chunk with ``choices: []``;
  with ``continuous_usage_stats`` every chunk also carries ``usage`` so far;
- then ``data: [DONE]``.
"""

from __future__ import annotations

import orjson

DONE = b"data: [DONE]\n\n"


def _usage(prompt: int, completion: int) -> bytes:
    return b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
        prompt,
        completion,
        prompt + completion,
    )


class ChunkEncoder:
    """One chat or completions stream. ``start``, ``token`` and ``end`` are what the engine loop
    calls for every protocol (``hosted_sse.py`` has the others); the first ``n_reason`` tokens
    of a chat answer go out as ``reasoning_content``."""

    __slots__ = (
        "chat",
        "prompt_tokens",
        "continuous",
        "n_reason",
        "_head",
        "_rhead",
        "_mid",
        "_tail",
        "_envelope",
    )

    def __init__(
        self,
        rid: str,
        created: int,
        model: str,
        chat: bool,
        prompt_tokens: int,
        continuous_usage: bool = False,
    ):
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.continuous = continuous_usage
        self.n_reason = 0
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._envelope = b'data: {"id":%s,"object":"%s","created":%d,"model":%s,' % (
            orjson.dumps(rid),
            obj.encode(),
            created,
            orjson.dumps(model),
        )
        self._head = self._envelope + (
            b'"choices":[{"index":0,"delta":{"content":' if chat else b'"choices":[{"index":0,"text":'
        )
        self._rhead = self._envelope + b'"choices":[{"index":0,"delta":{"reasoning_content":'
        self._mid = b'},"logprobs":null,"finish_reason":' if chat else b',"logprobs":null,"finish_reason":'
        self._tail = b',"stop_reason":null}]' if not chat else b"}]"

    def start(self) -> bytes:
        """What goes out when the request is accepted: chat's role-only chunk, else nothing."""
        return self.role() if self.chat else b""

    def role(self) -> bytes:
        """The chat stream's first, role-only chunk."""
        out = self._envelope + (
            b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}]'
        )
        return out + self._usage_suffix(0)

    def token(self, word_json: bytes, completion_tokens: int, finish_reason: bytes = b"null") -> bytes:
        """A content chunk; ``finish_reason`` is JSON (``b'"length"'``) on the last one."""
        head = self._rhead if completion_tokens <= self.n_reason else self._head
        return (
            head + word_json + self._mid + finish_reason + self._tail + self._usage_suffix(completion_tokens)
        )

    def end(self, completion_tokens: int, include_usage: bool, finish_reason: str = "length") -> bytes:
        """After the last token: the usage chunk when asked for, then ``[DONE]``."""
        return (self.usage(completion_tokens) if include_usage else b"") + DONE

    def usage(self, completion_tokens: int) -> bytes:
        """The final usage-only chunk (``choices: []``)."""
        return (
            self._envelope
            + b'"choices":[],"usage":'
            + _usage(self.prompt_tokens, completion_tokens)
            + b"}\n\n"
        )

    def _usage_suffix(self, completion_tokens: int) -> bytes:
        if self.continuous:
            return b',"usage":' + _usage(self.prompt_tokens, completion_tokens) + b"}\n\n"
        return b"}\n\n"


def error_body(message: str, status: int, kind: str = "BadRequestError", param: str | None = None) -> bytes:
    """An OpenAI-style error object (vLLM's shape)."""
    return orjson.dumps({"object": "error", "message": message, "type": kind, "param": param, "code": status})


class ToolCallEncoder(ChunkEncoder):
    """A chat stream whose answer is one tool call: token 1 names it (id, type, name, empty
    arguments), every later token is a piece of its ``function.arguments``."""

    __slots__ = ("_call", "_args")

    def __init__(self, rid: str, created: int, model: str, prompt_tokens: int, name: str, continuous: bool):
        super().__init__(rid, created, model, True, prompt_tokens, continuous)
        call = {
            "index": 0,
            "id": f"call_{rid}",
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        self._call = (
            self._envelope + b'"choices":[{"index":0,"delta":{"tool_calls":[' + orjson.dumps(call) + b"]"
        )
        self._args = (
            self._envelope
            + b'"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
        )

    def token(self, word_json: bytes, completion_tokens: int, finish_reason: bytes = b"null") -> bytes:
        if completion_tokens == 1:
            head = self._call
        else:
            head = self._args + word_json + b"}}]"
        return head + self._mid + finish_reason + self._tail + self._usage_suffix(completion_tokens)
