"""The simulator's encoders for the two hosted-API streams: OpenAI's Responses API and
Anthropic's Messages API (shares no code with the client, as ``sse.py`` for chat).

Both follow ``ChunkEncoder``'s interface, so the engine loop paces every protocol alike:
``start()`` when the request is accepted (before any token: no client may take it for one),
``token(word_json, k, finish)`` per token, ``end(k, include_usage)`` after the last one. The
first ``n_reason`` tokens are reasoning (the sim's ``reasoning_tokens``), the rest answer text.

- Responses: ``response.created``, ``response.in_progress``, then an output item per kind
  (``reasoning`` with ``response.reasoning_text.delta`` events, ``message`` with
  ``response.output_text.delta``), their ``*.done`` events, and ``response.completed`` (cut at
  ``max_output_tokens``: ``response.incomplete``, as OpenAI ends it) with ``usage``
  ``{input_tokens, output_tokens, output_tokens_details.reasoning_tokens}``.
- Messages: ``message_start`` (``usage.input_tokens``), a ``thinking`` then a ``text`` content
  block (``content_block_start``, ``content_block_delta`` ``thinking_delta`` / ``text_delta``,
  ``content_block_stop``), ``message_delta`` (``stop_reason``, ``usage.output_tokens``),
  ``message_stop``. Each event also has its ``event:`` line, as Anthropic sends them.

Requests are read as chat requests (``as_chat``): the prompt is counted and seeded exactly as
the same turns sent to ``/v1/chat/completions``.
"""

from __future__ import annotations

from typing import Any

import orjson


def _ev(name: str, obj: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (name.encode(), orjson.dumps(obj))


def as_chat(body: Any, endpoint: str) -> Any:
    """A Responses or Messages request body as the chat body of the same turns and limits."""
    if not isinstance(body, dict):
        return body
    out = {k: body[k] for k in ("model", "ignore_eos", "min_tokens") if k in body}
    out["stream"] = body.get("stream")
    if endpoint == "responses":
        given = body.get("input")
        out["messages"] = [{"role": "user", "content": given}] if isinstance(given, str) else given
        if "max_output_tokens" in body:
            out["max_tokens"] = body["max_output_tokens"]
    else:
        system = body.get("system")
        turns = body.get("messages")
        if isinstance(system, str) and isinstance(turns, list):
            turns = [{"role": "system", "content": system}, *turns]
        out["messages"] = turns
        out["max_tokens"] = body.get("max_tokens")
    return out


class ResponsesEncoder:
    """One ``/v1/responses`` stream; tracks which output item is open."""

    __slots__ = ("rid", "model", "created", "prompt_tokens", "n_reason", "seq", "open", "text")

    def __init__(self, rid: str, created: int, model: str, prompt_tokens: int, n_reason: int) -> None:
        self.rid, self.created, self.model = rid, created, model
        self.prompt_tokens, self.n_reason = prompt_tokens, n_reason
        self.seq = 0
        self.open: str | None = None  # "reasoning" | "message"
        self.text: list[bytes] = []  # the open item's words (JSON), for its *.done event

    def _e(self, name: str, **fields: Any) -> bytes:
        self.seq += 1
        return _ev(name, {"type": name, "sequence_number": self.seq, **fields})

    def _response(self, status: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        r: dict[str, Any] = {"id": self.rid, "object": "response", "created_at": self.created}
        r.update(model=self.model, status=status, output=[], usage=usage)
        if status == "incomplete":
            r["incomplete_details"] = {"reason": "max_output_tokens"}
        return r

    def start(self) -> bytes:
        return self._e("response.created", response=self._response("in_progress")) + self._e(
            "response.in_progress", response=self._response("in_progress")
        )

    def _item(self, kind: str) -> bytes:
        idx = 0 if kind == "reasoning" or not self.n_reason else 1
        item = {"id": f"{kind[:2]}_{self.rid}", "type": kind, "status": "in_progress"}
        self.open, self.text = kind, []
        out = self._e("response.output_item.added", output_index=idx, item=item)
        part = {"type": "reasoning_text" if kind == "reasoning" else "output_text", "text": ""}
        return out + self._e(
            "response.content_part.added", item_id=item["id"], output_index=idx, content_index=0, part=part
        )

    def _close(self) -> bytes:
        kind = self.open
        if kind is None:
            return b""
        idx = 0 if kind == "reasoning" or not self.n_reason else 1
        iid = f"{kind[:2]}_{self.rid}"
        text = "".join(orjson.loads(w) for w in self.text)
        name = "response.reasoning_text.done" if kind == "reasoning" else "response.output_text.done"
        out = self._e(name, item_id=iid, output_index=idx, content_index=0, text=text)
        item = {"id": iid, "type": kind, "status": "completed"}
        self.open = None
        return out + self._e("response.output_item.done", output_index=idx, item=item)

    def token(self, word_json: bytes, completion_tokens: int, finish_reason: bytes = b"null") -> bytes:
        kind = "reasoning" if completion_tokens <= self.n_reason else "message"
        out = b""
        if self.open != kind:
            out = self._close() + self._item(kind)
        self.text.append(word_json)
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        idx = 0 if kind == "reasoning" or not self.n_reason else 1
        self.seq += 1
        return out + (
            b'event: %s\ndata: {"type":"%s","sequence_number":%d,"item_id":"%s_%s","output_index":%d,'
            b'"content_index":0,"delta":%s}\n\n'
            % (name.encode(), name.encode(), self.seq, kind[:2].encode(), self.rid.encode(), idx, word_json)
        )

    def end(self, completion_tokens: int, include_usage: bool, finish_reason: str = "length") -> bytes:
        usage = {
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": min(self.n_reason, completion_tokens)},
            "total_tokens": self.prompt_tokens + completion_tokens,
        }
        status = "incomplete" if finish_reason == "length" else "completed"
        return self._close() + self._e(f"response.{status}", response=self._response(status, usage))


class MessagesEncoder:
    """One ``/v1/messages`` stream; tracks which content block is open."""

    __slots__ = ("rid", "model", "prompt_tokens", "n_reason", "block", "open")

    def __init__(self, rid: str, created: int, model: str, prompt_tokens: int, n_reason: int) -> None:
        self.rid, self.model = rid, model
        self.prompt_tokens, self.n_reason = prompt_tokens, n_reason
        self.block = -1
        self.open: str | None = None  # "thinking" | "text"

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": self.rid,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 1},
        }
        return _ev("message_start", {"type": "message_start", "message": message}) + _ev(
            "ping", {"type": "ping"}
        )

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = None
        return _ev("content_block_stop", {"type": "content_block_stop", "index": self.block})

    def token(self, word_json: bytes, completion_tokens: int, finish_reason: bytes = b"null") -> bytes:
        kind = "thinking" if completion_tokens <= self.n_reason else "text"
        out = b""
        if self.open != kind:
            out = self._close()
            self.block += 1
            self.open = kind
            block = {"type": kind, kind: ""}
            out += _ev(
                "content_block_start",
                {"type": "content_block_start", "index": self.block, "content_block": block},
            )
        return out + (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
            b'"delta":{"type":"%s_delta","%s":%s}}\n\n'
            % (self.block, kind.encode(), kind.encode(), word_json)
        )

    def end(self, completion_tokens: int, include_usage: bool, finish_reason: str = "length") -> bytes:
        stop = "max_tokens" if finish_reason == "length" else "end_turn"
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": completion_tokens},
        }
        return self._close() + _ev("message_delta", delta) + _ev("message_stop", {"type": "message_stop"})
