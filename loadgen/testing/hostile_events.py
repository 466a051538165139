"""The hostile test server's response bodies (``hostile.py``): a stream's SSE events, per mode.

It exists so that what each mode *says* (the OpenAI-style chunks, and the malformed event, the
missing ``[DONE]`` or the 10 MB event a mode puts among them) is written in one place apart
from how the server *sends* it (``hostile.py``, the timing and connection faults) and from the
HTTP bytes (``hostile_wire.py``). Every function here is pure: payloads in, bytes out.

Like the rest of the hostile server it imports only the standard library, never the client side.
"""

from __future__ import annotations

from typing import Any

from loadgen.testing.hostile_wire import dumps, sse

WORDS = ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta")


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

    def obj(choice: Any, usage: Any = None) -> dict[str, Any]:
        d = dict(base, choices=[] if choice is None else [choice])
        if usage is not None:
            d["usage"] = usage
        return d

    def token(i: int) -> dict[str, Any]:
        text = " " + WORDS[i % len(WORDS)]
        if chat:
            return {"index": 0, "delta": {"content": text}, "finish_reason": None}
        return {"index": 0, "text": text, "finish_reason": None}

    if mode == "zero_tokens":
        n = 0
    payloads: list[bytes] = []
    if chat:
        payloads.append(
            dumps(obj({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}))
        )
    if mode == "huge_event":
        if huge is None:
            raise ValueError("huge_event needs the huge event's text")
        head = dumps(obj(token(0)))
        marker = dumps(" " + WORDS[0])
        payloads.append(head.replace(marker, b'"' + huge + b'"', 1))
        n_sent = 1
    else:
        payloads += [dumps(obj(token(i))) for i in range(n)]
        n_sent = n
    final: dict[str, Any] = {"index": 0, "finish_reason": "stop" if n_sent == 0 else "length"}
    if chat:
        final["delta"] = {}
    else:
        final["text"] = ""
    payloads.append(dumps(obj(final)))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": n_sent,
        "total_tokens": prompt_tokens + n_sent,
    }
    if mode == "typed_usage_null":
        payloads.append(dumps(obj(None, dict(usage, completion_tokens=None, total_tokens=None))))
    elif usage_on and mode != "no_usage":
        payloads.append(dumps(obj(None, usage)))
    # The fault, placed after the first content event (index 2 in chat, after the role).
    at = 2 if chat else 1
    bad: bytes | None = None
    if mode == "non_object_json":
        bad = b"[1,2]"
    elif mode == "invalid_utf8":
        bad = dumps(obj(token(0))).replace(b'"content":"', b'"content":"\xff\xfe', 1)
        bad = bad.replace(b'"text":"', b'"text":"\xff\xfe', 1)
    elif mode == "error_event":
        bad = dumps({"error": {"message": "boom", "type": "InternalError", "code": 500}})
    elif mode == "object_error_event":
        bad = dumps(
            {"object": "error", "message": "boom", "type": "BadRequestError", "param": None, "code": 400}
        )
    elif mode == "typed_choices_str":
        bad = dumps(dict(base, choices="abc"))
    elif mode == "typed_delta_str":
        bad = dumps(
            dict(base, choices=[{"index": 0, "delta": "str", "finish_reason": None}] if chat else ["str"])
        )
    if bad is not None:
        payloads.insert(min(at, len(payloads)), bad)
    if mode != "no_done":
        payloads.append(b"[DONE]")
    if mode == "garbage_lines":
        return [
            b"<html>\n<head><title>200 OK</title></head>\n",
            b"<body>upstream busy, try later</body>\n",
            b"this is not an event stream\n\n",
            b"</html>\n\n",
        ]
    if mode == "no_data_prefix":
        return [p + b"\n\n" for p in payloads]
    return [sse(p) for p in payloads]
