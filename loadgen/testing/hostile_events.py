"""The hostile test server's response bodies (``hostile.py``): a stream's SSE events, per mode.

It exists so that what each mode *says* (the OpenAI-style chunks, and the malformed event, the
missing ``[DONE]`` or the 10 MB event a mode puts among them) is written in one place apart
from how the server *sends* it (``hostile.py``, the timing and connection faults) and from the
HTTP bytes (``hostile_http.py``). Every function here is pure: payloads in, bytes out.

Like the rest of the hostile server it imports only the standard library, never the client side.
"""

from __future__ import annotations

from typing import Any

from loadgen.testing.hostile_http import dumps, sse

WORDS = ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta")
# A chat stream that answers with a tool call, one fault each (completions stream normally).
TOOL_MODES: tuple[str, ...] = ("tool_no_index", "tool_args_not_string", "tool_cut_mid_call")


def huge_text(size: int) -> bytes:
    """``size`` bytes of words, to fill the one content event of ``huge_event``."""
    words = " ".join(WORDS).encode()
    return (words * (size // len(words) + 1))[:size]


def full_completion(chat: bool, base: dict[str, Any], n: int, prompt_tokens: int) -> dict[str, Any]:
    """The whole (non-streamed) completion of ``n`` tokens that ``not_sse`` answers with."""
    text = "".join(" " + WORDS[i % len(WORDS)] for i in range(n))
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
    return dict(
        base,
        object="chat.completion" if chat else "text_completion",
        choices=[choice],
        usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n,
            "total_tokens": prompt_tokens + n,
        },
    )


def stream_events(
    mode: str,
    chat: bool,
    base: dict[str, Any],
    n: int,
    usage_on: bool,
    prompt_tokens: int,
    huge: bytes | None = None,
) -> list[bytes]:
    """The stream's events as whole SSE blocks (``data: ...\\n\\n``), with the mode's fault.

    ``base`` holds the fields every chunk carries (id, object, created, model); ``huge`` is the
    text of ``huge_event``'s one content event (``huge_text``), needed in that mode only."""
    if mode == "garbage_lines":
        return [
            b"<html>\n<head><title>200 OK</title></head>\n",
            b"<body>upstream busy, try later</body>\n",
            b"this is not an event stream\n\n",
            b"</html>\n\n",
        ]
    if mode in TOOL_MODES and chat:
        return [sse(p) for p in _tool_call(mode, base)]
    payloads = _payloads(mode, chat, base, 0 if mode == "zero_tokens" else n, usage_on, prompt_tokens, huge)
    bad = _bad_event(mode, chat, base)
    if bad is not None:
        # The fault, placed after the first content event (index 2 in chat, after the role).
        payloads.insert(min(2 if chat else 1, len(payloads)), bad)
    if mode == "no_finish":  # the content only: cut before the finish, ended cleanly
        return [sse(p) for p in payloads if b'"finish_reason":null' in p]
    if mode not in ("no_done", "unknown_field_422"):
        payloads.append(b"[DONE]")
    if mode == "no_data_prefix":
        return [p + b"\n\n" for p in payloads]
    return [sse(p) for p in payloads]


def _obj(base: dict[str, Any], choice: Any, usage: Any = None) -> dict[str, Any]:
    d = dict(base, choices=[] if choice is None else [choice])
    if usage is not None:
        d["usage"] = usage
    return d


def _token(chat: bool, i: int) -> dict[str, Any]:
    text = " " + WORDS[i % len(WORDS)]
    if chat:
        return {"index": 0, "delta": {"content": text}, "finish_reason": None}
    return {"index": 0, "text": text, "finish_reason": None}


def _payloads(
    mode: str,
    chat: bool,
    base: dict[str, Any],
    n: int,
    usage_on: bool,
    prompt_tokens: int,
    huge: bytes | None,
) -> list[bytes]:
    """The JSON of a well-formed stream of ``n`` tokens (``huge_event``: one huge one): the role
    (chat), the tokens, the finish and the usage chunk when asked (the usage modes' faults too)."""
    payloads: list[bytes] = []
    if chat:
        payloads.append(
            dumps(
                _obj(base, {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
            )
        )
    if mode == "huge_event":
        if huge is None:
            raise ValueError("huge_event needs the huge event's text")
        head = dumps(_obj(base, _token(chat, 0)))
        marker = dumps(" " + WORDS[0])
        payloads.append(head.replace(marker, b'"' + huge + b'"', 1))
        n_sent = 1
    else:
        payloads += [dumps(_obj(base, _token(chat, i))) for i in range(n)]
        n_sent = n
    final: dict[str, Any] = {"index": 0, "finish_reason": "stop" if n_sent == 0 else "length"}
    if chat:
        final["delta"] = {}
    else:
        final["text"] = ""
    payloads.append(dumps(_obj(base, final)))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": n_sent,
        "total_tokens": prompt_tokens + n_sent,
    }
    if mode == "typed_usage_null":
        payloads.append(dumps(_obj(base, None, dict(usage, completion_tokens=None, total_tokens=None))))
    elif usage_on and mode != "no_usage":
        payloads.append(dumps(_obj(base, None, usage)))
    return payloads


def _bad_event(mode: str, chat: bool, base: dict[str, Any]) -> bytes | None:
    """The one malformed event the mode puts mid-stream, or None for a mode without one."""
    if mode == "non_object_json":
        return b"[1,2]"
    if mode == "invalid_utf8":
        bad = dumps(_obj(base, _token(chat, 0))).replace(b'"content":"', b'"content":"\xff\xfe', 1)
        return bad.replace(b'"text":"', b'"text":"\xff\xfe', 1)
    if mode == "error_event":
        return dumps({"error": {"message": "boom", "type": "InternalError", "code": 500}})
    if mode == "object_error_event":
        return dumps(
            {"object": "error", "message": "boom", "type": "BadRequestError", "param": None, "code": 400}
        )
    if mode == "typed_choices_str":
        return dumps(dict(base, choices="abc"))
    if mode == "typed_delta_str":
        return dumps(
            dict(base, choices=[{"index": 0, "delta": "str", "finish_reason": None}] if chat else ["str"])
        )
    return None


def _tool_call(mode: str, base: dict[str, Any]) -> list[bytes]:
    """A chat answer that calls ``get_weather`` in pieces, with the mode's fault: the second
    piece without its ``index`` (``tool_no_index``), its arguments an object instead of a
    string (``tool_args_not_string``), or the stream ending after two argument pieces with no
    finish reason and no ``[DONE]`` (``tool_cut_mid_call``)."""

    def piece(call: dict[str, Any]) -> bytes:
        return dumps(_obj(base, {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}))

    role = {"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}
    name = {
        "index": 0,
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    first: dict[str, Any] = {"index": 0, "function": {"arguments": '{"city": '}}
    if mode == "tool_no_index":
        first = {"function": {"arguments": '{"city": '}}
    elif mode == "tool_args_not_string":
        first = {"index": 0, "function": {"arguments": {"city": "Paris"}}}
    out = [
        dumps(_obj(base, role)),
        piece(name),
        piece(first),
        piece({"index": 0, "function": {"arguments": '"Paris"'}}),
    ]
    if mode == "tool_cut_mid_call":
        return out
    finish = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    return [*out, piece({"index": 0, "function": {"arguments": "}"}}), dumps(_obj(base, finish)), b"[DONE]"]
