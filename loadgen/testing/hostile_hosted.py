"""The hostile server's streams for the hosted-API paths (``/v1/responses``, ``/v1/messages``):
a well-formed stream of each shape, and one fault per event shape a client of them must read.

    responses_no_delta          a ``response.output_text.delta`` event without ``delta``
    responses_truncated_done    ``response.completed`` cut inside its JSON, then the stream ends
    responses_error_event       an ``error`` event mid-stream (``{"type": "error", "code", "message"}``)
    responses_failed            ``response.failed`` mid-stream, its ``response.error`` saying why
    messages_delta_not_text     a ``text_delta`` whose ``text`` is a number
    messages_unknown_delta      a ``content_block_delta`` of a delta type no version documents
                                (skipped, as Anthropic asks of clients), then a normal end
    messages_error_event        an ``error`` event of type ``api_error`` mid-stream
    messages_no_stop            a whole message without ``message_stop``

Every other hostile mode (resets, stalls, one-byte writes, ...) sends the well-formed stream of
the path's shape with its wire fault. Pure functions, standard library only, as
``hostile_events.py``.
"""

from __future__ import annotations

from loadgen.testing.hostile_http import dumps

WORDS = ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta")
HOSTED_MODES: tuple[str, ...] = (
    "responses_no_delta",
    "responses_truncated_done",
    "responses_error_event",
    "responses_failed",
    "messages_delta_not_text",
    "messages_unknown_delta",
    "messages_error_event",
    "messages_no_stop",
)


def _ev(obj: dict) -> bytes:
    return b"event: " + str(obj["type"]).encode() + b"\ndata: " + dumps(obj) + b"\n\n"


def responses_events(mode: str, rid: str, n: int, prompt_tokens: int) -> list[bytes]:
    """A Responses stream of ``n`` text deltas with ``mode``'s fault after the first."""
    head = {"id": rid, "object": "response", "status": "in_progress"}
    out = [_ev({"type": "response.created", "response": head})]
    deltas = [_ev({"type": "response.output_text.delta", "delta": " " + WORDS[i % 8]}) for i in range(n)]
    bad = {
        "responses_no_delta": _ev({"type": "response.output_text.delta", "item_id": "m", "output_index": 0}),
        "responses_error_event": _ev({"type": "error", "code": "server_error", "message": "boom"}),
        "responses_failed": _ev(
            {"type": "response.failed", "response": dict(head, status="failed", error={"message": "boom"})}
        ),
    }.get(mode)
    out += deltas[:1] + ([bad] if bad else []) + deltas[1:]
    usage = {"input_tokens": prompt_tokens, "output_tokens": n, "total_tokens": prompt_tokens + n}
    done = _ev({"type": "response.completed", "response": dict(head, status="completed", usage=usage)})
    if mode == "responses_truncated_done":
        done = done[: len(done) // 2] + b"\n\n"
    return [*out, done]


def messages_events(mode: str, rid: str, n: int, prompt_tokens: int) -> list[bytes]:
    """A Messages stream of ``n`` text deltas with ``mode``'s fault after the first."""
    msg = {"id": rid, "type": "message", "role": "assistant", "usage": {"input_tokens": prompt_tokens}}
    out = [
        _ev({"type": "message_start", "message": msg}),
        _ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ]
    deltas = [
        _ev(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": " " + WORDS[i % 8]},
            }
        )
        for i in range(n)
    ]
    bad = {
        "messages_delta_not_text": _ev(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 7}}
        ),
        "messages_unknown_delta": _ev(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "hologram_delta", "beams": 3}}
        ),
        "messages_error_event": _ev({"type": "error", "error": {"type": "api_error", "message": "boom"}}),
    }.get(mode)
    out += deltas[:1] + ([bad] if bad else []) + deltas[1:]
    out += [
        _ev({"type": "content_block_stop", "index": 0}),
        _ev({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": n}}),
    ]
    if mode != "messages_no_stop":
        out.append(_ev({"type": "message_stop"}))
    return out
