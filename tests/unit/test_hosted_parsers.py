"""The Responses and Messages parsers on exact bytes: literal streams (with their ``event:``
lines, as the providers send them) through the adapters over a ``FakeTransport``, whole and one
byte per read; each token event carries the time of the read that completed it, reasoning
deltas are chunks for TTFT but not content, usage is read from the terminal events."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from loadgen import records as R
from loadgen.backends import registry
from loadgen.backends.stream import Live
from loadgen.config import TargetConfig
from loadgen.testing.fake_transport import FakeResponse, FakeTransport, reads, split_every

TARGET = TargetConfig()  # the profile's target section at its defaults, as the adapters read it
SPEC = R.RequestSpec(
    id=0,
    prompt="Say hello",
    messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}],
    prompt_tokens=5,
    output_tokens=4,
)


def ev(obj: dict[str, Any]) -> bytes:
    return b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def send(endpoint: str, body: bytes, per_byte: bool = False) -> tuple[R.RequestRecord, FakeTransport, list]:
    timed = reads(split_every(body, 1) if per_byte else [body])
    fake = FakeTransport(FakeResponse(headers={"content-type": "text/event-stream"}, chunks=timed))
    rec = R.RequestRecord(0, False, 0, 0, SPEC.output_tokens, SPEC.prompt_tokens)
    asyncio.run(registry.backend(endpoint).for_target(TARGET, "m", fake, Live()).send(SPEC, rec))
    return rec, fake, timed


def end_times(body: bytes, events: list[bytes], timed: list) -> list[int]:
    """The arrival time of the read that completed each event."""
    out, pos = [], 0
    for e in events:
        pos = body.index(e, pos) + len(e)
        acc = 0
        for t, data in timed:
            acc += len(data)
            if pos - 1 < acc:
                out.append(t)
                break
    return out


# --- Responses -------------------------------------------------------------------------------
def r_delta(kind: str, text: Any) -> bytes:
    return ev({"type": f"response.{kind}.delta", "item_id": "i", "output_index": 0, "delta": text})


R_CREATED = ev({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}})
R_DONE = ev(
    {
        "type": "response.completed",
        "response": {
            "id": "resp_1",
            "status": "completed",
            "usage": {
                "input_tokens": 9,
                "output_tokens": 4,
                "output_tokens_details": {"reasoning_tokens": 2},
            },
        },
    }
)
R_TOKENS = [
    r_delta("reasoning_text", "Hm"),
    r_delta("reasoning_summary_text", "m."),
    r_delta("output_text", "Hel"),
    r_delta("output_text", "lo"),
]


class TestResponses:
    @pytest.mark.parametrize("per_byte", (False, True), ids=("one_read", "per_byte"))
    def test_deltas_are_chunks_and_usage_comes_from_completed(self, per_byte):
        """Two reasoning deltas then two text deltas: four chunks at their reads' times, the
        first two reasoning (TTFT at the first, first content at the third), usage from
        response.completed; other events (item added, *.done) are not tokens."""
        added = ev({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}})
        events = [
            R_CREATED,
            added,
            *R_TOKENS,
            ev({"type": "response.output_text.done", "text": "Hello"}),
            R_DONE,
        ]
        body = b"".join(events)
        rec, fake, timed = send("responses", body, per_byte)
        t = end_times(body, R_TOKENS, timed)
        assert (rec.ok, rec.response_id, rec.output_tokens, rec.prompt_tokens) == (True, "resp_1", 4, 9)
        assert (rec.token_source, rec.prompt_tokens_source) == ("usage", "usage")
        assert (rec.chunk_times_ns, rec.chunk_tokens) == (t, [1, 1, 1, 1])
        assert rec.reasoning_times_ns == t[:2] and rec.t_first_token_ns == t[0]
        assert rec.t_first_content_ns == t[2]
        (req,) = fake.posts
        assert req.path == "/v1/responses"
        assert req.json == {
            "model": "m",
            "input": SPEC.messages,
            "max_output_tokens": 4,
            "stream": True,
            "ignore_eos": True,
        }

    def test_incomplete_at_max_output_tokens_is_a_normal_end(self):
        """response.incomplete (reason max_output_tokens) ends the stream as completed does."""
        done = R_DONE.replace(b"response.completed", b"response.incomplete")
        rec, _f, _t = send("responses", R_CREATED + b"".join(R_TOKENS) + done)
        assert (rec.ok, rec.output_tokens) == (True, 4)

    @pytest.mark.parametrize(
        "tail,cls,message",
        [
            (ev({"type": "error", "code": "server_error", "message": "boom"}), R.SERVER_ERROR_EVENT, "boom"),
            (
                ev({"type": "response.failed", "response": {"id": "r", "error": {"message": "gone"}}}),
                R.SERVER_ERROR_EVENT,
                "response.failed: gone",
            ),
            (b"", R.NO_DONE, "the stream closed without response.completed"),
            (ev({"type": "response.output_text.delta"}), R.MALFORMED, None),
            (r_delta("output_text", 5), R.MALFORMED, None),
            (b'data: {"type": "response.completed", "resp\n\n', R.MALFORMED, None),
        ],
        ids=("error", "failed", "no_terminal", "no_delta", "delta_not_str", "truncated_completed"),
    )
    def test_failures_are_classed(self, tail, cls, message):
        """Each way a Responses stream goes wrong, after one good delta: its class, no raise."""
        rec, _f, _t = send("responses", R_CREATED + R_TOKENS[2] + tail)
        assert (rec.ok, rec.error_class) == (False, cls)
        if message is not None:
            assert rec.error_message == message


# --- Messages --------------------------------------------------------------------------------
def m_delta(kind: str, key: str, text: Any, index: int = 0) -> bytes:
    return ev({"type": "content_block_delta", "index": index, "delta": {"type": kind, key: text}})


M_START = ev(
    {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 11, "output_tokens": 1}}}
)
M_END = ev(
    {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 4}}
) + ev({"type": "message_stop"})
M_TOKENS = [
    m_delta("thinking_delta", "thinking", "Hm"),
    m_delta("thinking_delta", "thinking", "m."),
    m_delta("text_delta", "text", "Hel", 1),
    m_delta("text_delta", "text", "lo", 1),
]


class TestMessages:
    @pytest.mark.parametrize("per_byte", (False, True), ids=("one_read", "per_byte"))
    def test_thinking_and_text_deltas_with_usage_in_two_halves(self, per_byte):
        """Thinking then text deltas are chunks (thinking: reasoning); a signature delta and a
        ping are not; input tokens from message_start, output from message_delta."""
        block = ev(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}
        )
        sig = m_delta("signature_delta", "signature", "c2ln")
        events = [M_START, ev({"type": "ping"}), block, *M_TOKENS[:2], sig, *M_TOKENS[2:], M_END]
        body = b"".join(events)
        rec, fake, timed = send("messages", body, per_byte)
        t = end_times(body, M_TOKENS, timed)
        assert (rec.ok, rec.response_id, rec.output_tokens, rec.prompt_tokens) == (True, "msg_1", 4, 11)
        assert (rec.token_source, rec.prompt_tokens_source) == ("usage", "usage")
        assert rec.chunk_times_ns == t and rec.reasoning_times_ns == t[:2]
        assert (rec.t_first_token_ns, rec.t_first_content_ns) == (t[0], t[2])
        (req,) = fake.posts
        assert req.path == "/v1/messages"
        assert req.json == {
            "model": "m",
            "messages": [{"role": "user", "content": "Say hello"}],
            "system": "Be brief.",
            "max_tokens": 4,
            "stream": True,
            "ignore_eos": True,
        }

    def test_a_stop_reason_then_the_end_of_body_is_a_whole_answer(self):
        """message_delta gave the stop reason and the count; the body ending there is accepted
        and said (stream_end no_terminator), unless target.require_done."""
        body = M_START + M_TOKENS[2] + M_END[: M_END.index(b"event: message_stop")]
        rec, _f, _t = send("messages", body)
        assert (rec.ok, rec.output_tokens, rec.finish_reason) == (True, 4, "max_tokens")
        assert rec.stream_end == R.NO_TERMINATOR
        rec, _f, _t = send("messages", M_START + M_TOKENS[2] + M_END)
        assert rec.stream_end == R.TERMINATOR

    def test_an_unknown_delta_type_is_skipped(self):
        """A delta type no version documents carries no text token: skipped, the stream is ok."""
        body = M_START + M_TOKENS[2] + m_delta("hologram_delta", "beams", 3) + M_TOKENS[3] + M_END
        rec, _f, _t = send("messages", body)
        assert (rec.ok, len(rec.chunk_times_ns), rec.output_tokens) == (True, 2, 4)

    @pytest.mark.parametrize(
        "tail,cls,message",
        [
            (
                ev({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
                R.SERVER_ERROR_EVENT,
                "overloaded_error: Overloaded",
            ),
            (
                ev({"type": "error", "error": {"type": "api_error", "message": "Internal"}}),
                R.SERVER_ERROR_EVENT,
                "api_error: Internal",
            ),
            (
                ev({"type": "content_block_stop", "index": 0}),
                R.NO_DONE,
                "the stream closed without message_stop (no stop_reason came)",
            ),
            (m_delta("text_delta", "text", 7), R.MALFORMED, None),
            (ev({"type": "content_block_delta", "index": 0}), R.MALFORMED, None),
            (b'data: {"type": "message_delta", "us\n\n', R.MALFORMED, None),
        ],
        ids=("overloaded", "api_error", "no_stop", "text_not_str", "no_delta", "truncated"),
    )
    def test_failures_are_classed(self, tail, cls, message):
        """Each way a Messages stream goes wrong, after one good delta: its class, no raise."""
        rec, _f, _t = send("messages", M_START + M_TOKENS[2] + tail)
        assert (rec.ok, rec.error_class) == (False, cls)
        if message is not None:
            assert rec.error_message == message

    def test_the_key_goes_in_x_api_key_with_the_version_header(self):
        """Messages send target.api_key_env's key as x-api-key beside anthropic-version; every
        other protocol as a bearer token."""
        backend = registry.backend("messages")
        assert backend.auth_headers("k3y") == {"x-api-key": "k3y"}
        assert backend.HEADERS == {"anthropic-version": "2023-06-01"}
        assert registry.backend("responses").auth_headers("k3y") == {"Authorization": "Bearer k3y"}
