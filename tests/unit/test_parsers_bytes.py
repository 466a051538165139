"""The protocol parsers on exact byte splits: the same record however the bytes were cut into reads.

Each protocol's literal stream goes through its adapter over a ``FakeTransport`` (no server, no
clock) fed (a) as one read, (b) one byte per read, each read with its own time, (c) with CRLF
line endings, and (d) at random cut points (hypothesis). Everything in the record but the times
must be the same for every split; each token-bearing event must carry the time of the read that
completed it (the one holding the last byte of its blank line), and the first byte the time of
the first read.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen import records as R
from loadgen.backends import registry
from loadgen.backends.stream import Live
from loadgen.backends.transports.base import ConnectFailed, ReadTimedOut, StreamBroken
from loadgen.config import TargetConfig
from loadgen.testing.fake_transport import FakeResponse, FakeTransport, Read, reads, split_at, split_every

LF, CRLF = b"\n", b"\r\n"
T0, STEP = 1_000_000, 1_000  # read k arrives at T0 + k * STEP
PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "triton": "/v2/models/ensemble/generate_stream",
    "sglang": "/generate",
}


TARGET = TargetConfig()  # the profile's target section at its defaults, as the adapters read it
ENDPOINTS = {
    "chat": "chat",
    "completions": "completions",
    "triton": "triton_generate",
    "sglang": "sglang_generate",
}


def make_adapter(protocol: str, transport: FakeTransport, target: Any = TARGET) -> Any:
    """The adapter for ``protocol`` over ``transport``, built as a run builds it."""
    model = "ensemble" if protocol == "triton" else "m"
    return registry.backend(ENDPOINTS[protocol]).for_target(target, model, transport, Live())


def j(obj: Any) -> bytes:
    return orjson.dumps(obj)


# --- the literal streams --------------------------------------------------------------------


def chat(delta: dict, rid: str = "chatcmpl-1", usage: dict | None = None, finish: str | None = None) -> bytes:
    obj: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        obj["usage"] = usage
    return j(obj)


def cmpl(text: str, rid: str = "cmpl-7", finish: str | None = None) -> bytes:
    return j(
        {
            "id": rid,
            "object": "text_completion",
            "model": "m",
            "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        }
    )


def triton(text: str, **extra: Any) -> bytes:
    return j({"model_name": "ensemble", "model_version": "1", "text_output": text, **extra})


def sgl(text: str, completion: int, rid: str = "sg-1", finish: Any = None) -> bytes:
    return j(
        {
            "text": text,
            "meta_info": {
                "id": rid,
                "prompt_tokens": 5,
                "completion_tokens": completion,
                "finish_reason": finish,
            },
        }
    )


DONE = b"[DONE]"
COMMENT = b": keep-alive"  # an SSE comment block: not an event


@dataclass(frozen=True)
class Case:
    """One response and the record it must give. ``events`` are SSE data payloads (a block
    starting with ``:`` is written as is); ``token_events`` the indices of the token-bearing
    ones; ``fail_event`` the index of the event that failed the record (its time is t_end)."""

    name: str
    protocol: str
    events: list[bytes]
    token_events: list[int]
    chunk_tokens: list[int]
    ok: bool
    error_class: str | None
    output_tokens: int | None
    response_id: str | None
    token_source: str = "chunks"
    error_message: str | None = None
    fail_event: int | None = None
    status: int = 200
    raw_body: bytes | None = None  # a non-SSE body (an HTTP error)
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    tools: tuple[str, ...] = ()  # a tool-call answer: the names its record must carry
    stream_end: str | None = None  # an ok record's: how its stream ended (None: not checked)


def call(index: Any, name: str | None = None, args: Any = None, cid: str | None = None) -> dict:
    """One ``delta.tool_calls`` piece (``index`` None: a piece without one)."""
    fn = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    piece: dict[str, Any] = {"function": fn}
    if index is not None:
        piece["index"] = index
    if cid is not None:
        piece.update(id=cid, type="function")
    return piece


TOOL_HEAD = [
    chat({"role": "assistant", "content": None}),
    chat({"tool_calls": [call(0, "get_weather", "", cid="call_a")]}),  # the name: a token
    chat({"tool_calls": [call(0, args='{"city": ')]}),
]

CASES = [
    Case(
        "chat",
        "chat",
        [
            chat({"role": "assistant", "content": ""}),  # role-only first delta: not a token
            chat({"content": "Hel"}),
            COMMENT,
            chat({"content": "lo"}),
            chat({"content": " wor"}),
            chat({}, finish="length"),
            j({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}),
            DONE,
        ],
        token_events=[1, 3, 4],
        chunk_tokens=[1, 1, 1],
        ok=True,
        error_class=None,
        output_tokens=3,
        response_id="chatcmpl-1",
        token_source="usage",
    ),
    Case(
        "chat_continuous_usage",
        "chat",
        [
            chat({"role": "assistant"}, usage={"prompt_tokens": 5, "completion_tokens": 0}),
            chat({"content": "Hel"}, usage={"prompt_tokens": 5, "completion_tokens": 1}),
            chat({"content": "lo wor"}, usage={"prompt_tokens": 5, "completion_tokens": 3}),  # 2 tokens
            chat({"content": "ld, hi"}, usage={"prompt_tokens": 5, "completion_tokens": 6}),  # 3 tokens
            chat({}, finish="length", usage={"prompt_tokens": 5, "completion_tokens": 6}),
            j({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}}),
            DONE,
        ],
        token_events=[1, 2, 3],
        chunk_tokens=[1, 2, 3],
        ok=True,
        error_class=None,
        output_tokens=6,
        response_id="chatcmpl-1",
        token_source="continuous_usage",
    ),
    Case(
        "chat_error_event",
        "chat",
        [
            chat({"role": "assistant"}),
            chat({"content": "Hel"}),
            j({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}),
            DONE,
        ],
        token_events=[1],
        chunk_tokens=[1],
        ok=False,
        error_class=R.SERVER_ERROR_EVENT,
        output_tokens=None,
        response_id="chatcmpl-1",
        error_message="engine died",
        fail_event=2,
    ),
    Case(
        "chat_truncated",
        "chat",
        [chat({"role": "assistant"}), chat({"content": "Hel"}), chat({"content": "lo"})],
        token_events=[1, 2],
        chunk_tokens=[1, 1],
        ok=False,
        error_class=R.NO_DONE,
        output_tokens=None,
        response_id="chatcmpl-1",
        error_message="the stream closed without data: [DONE] (it closed before any finish_reason)",
    ),
    Case(
        "chat_finished_without_done",  # transformers serve: finish, usage, then the body ends
        "chat",
        [
            chat({"role": "assistant", "content": ""}),
            chat({"content": "Hel"}),
            chat({"content": "lo"}),
            chat({}, finish="length"),
            j({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
        ],
        token_events=[1, 2],
        chunk_tokens=[1, 1],
        ok=True,
        error_class=None,
        output_tokens=2,
        response_id="chatcmpl-1",
        token_source="usage",
        stream_end=R.NO_TERMINATOR,
    ),
    Case(
        "chat_finished_before_its_usage",  # usage was asked for: an end before it is a cut
        "chat",
        [chat({"content": "Hel"}), chat({}, finish="length")],
        token_events=[0],
        chunk_tokens=[1],
        ok=False,
        error_class=R.NO_DONE,
        output_tokens=None,
        response_id="chatcmpl-1",
        error_message=(
            "the stream closed without data: [DONE] (it closed after the finish_reason, "
            "before the usage chunk that was asked for)"
        ),
    ),
    Case(
        "chat_http_400",
        "chat",
        [],
        token_events=[],
        chunk_tokens=[],
        ok=False,
        error_class="http_400",
        output_tokens=None,
        response_id=None,
        status=400,
        raw_body=j({"error": {"message": "max_tokens is too large", "type": "BadRequestError", "code": 400}}),
        headers={"content-type": "application/json"},
        error_message="max_tokens is too large",
    ),
    Case(
        "chat_tool_calls",
        "chat",
        [
            *TOOL_HEAD,
            chat({"tool_calls": [call(0, args='"Paris"}')]}),
            chat(
                {"tool_calls": [call(1, "get_time", '{"zone": "UTC"}', cid="call_b")]}
            ),  # one piece, 2nd call
            chat({"tool_calls": [call(1)]}),  # nothing in it: no token
            chat({}, finish="tool_calls"),
            j({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}),
            DONE,
        ],
        token_events=[1, 2, 3, 4],
        chunk_tokens=[1, 1, 1, 1],
        ok=True,
        error_class=None,
        output_tokens=4,
        response_id="chatcmpl-1",
        token_source="usage",
        tools=("get_weather", "get_time"),
    ),
    Case(
        "chat_tool_call_without_index",
        "chat",
        [*TOOL_HEAD, chat({"tool_calls": [call(None, args='"Paris"}')]}), DONE],
        token_events=[1, 2],
        chunk_tokens=[1, 1],
        ok=False,
        error_class=R.MALFORMED,
        output_tokens=None,
        response_id="chatcmpl-1",
        fail_event=3,
        tools=("get_weather",),
    ),
    Case(
        "chat_tool_call_arguments_not_a_string",
        "chat",
        [*TOOL_HEAD, chat({"tool_calls": [call(0, args={"city": "Paris"})]}), DONE],
        token_events=[1, 2],
        chunk_tokens=[1, 1],
        ok=False,
        error_class=R.MALFORMED,
        output_tokens=None,
        response_id="chatcmpl-1",
        fail_event=3,
        tools=("get_weather",),
    ),
    Case(
        "chat_tool_call_cut",
        "chat",
        TOOL_HEAD,
        token_events=[1, 2],
        chunk_tokens=[1, 1],
        ok=False,
        error_class=R.NO_DONE,
        output_tokens=None,
        response_id="chatcmpl-1",
        error_message=(
            "the stream closed without data: [DONE] "
            "(inside tool call 0 (get_weather, 9 characters of arguments))"
        ),
        tools=("get_weather",),
    ),
    Case(
        "completions",
        "completions",
        [cmpl("A"), cmpl(""), cmpl(" B C"), cmpl("", finish="length"), DONE],
        token_events=[0, 2],
        chunk_tokens=[1, 1],
        ok=True,
        error_class=None,
        output_tokens=2,
        response_id="cmpl-7",
    ),
    Case(
        "completions_truncated",
        "completions",
        [cmpl("A"), cmpl(" B")],
        token_events=[0, 1],
        chunk_tokens=[1, 1],
        ok=False,
        error_class=R.NO_DONE,
        output_tokens=None,
        response_id="cmpl-7",
        error_message="the stream closed without data: [DONE] (it closed before any finish_reason)",
    ),
    Case(
        "triton",
        "triton",
        [triton("Hel"), triton("lo"), triton(""), triton(" world")],  # no [DONE] in this protocol
        token_events=[0, 1, 3],
        chunk_tokens=[1, 1, 1],
        ok=True,
        error_class=None,
        output_tokens=3,
        response_id="req-42",
        headers={"Content-Type": "text/event-stream", "X-Request-Id": "req-42"},
    ),
    Case(
        "triton_num_output_tokens",
        "triton",
        [
            triton("Hel", num_output_tokens=[1], id="tr-9"),
            triton("lo wor", num_output_tokens=[2]),
            triton("ld", num_output_tokens=1),
            triton("", num_output_tokens=[0]),
        ],
        token_events=[0, 1, 2],
        chunk_tokens=[1, 2, 1],
        ok=True,
        error_class=None,
        output_tokens=4,
        response_id="tr-9",
        token_source="continuous_usage",
    ),
    Case(
        "triton_truncated",
        "triton",
        [triton("Hel"), triton("lo")],  # a cut stream ends normally
        token_events=[0, 1],
        chunk_tokens=[1, 1],
        ok=True,
        error_class=None,
        output_tokens=2,
        response_id=None,
    ),
    Case(
        "triton_error_event",
        "triton",
        [triton("Hel"), j({"error": "in ensemble 'ensemble', output tensor missing"})],
        token_events=[0],
        chunk_tokens=[1],
        ok=False,
        error_class=R.SERVER_ERROR_EVENT,
        output_tokens=None,
        response_id=None,
        error_message="in ensemble 'ensemble', output tensor missing",
        fail_event=1,
    ),
    Case(
        "triton_http_400",
        "triton",
        [],
        token_events=[],
        chunk_tokens=[],
        ok=False,
        error_class="http_400",
        output_tokens=None,
        response_id=None,
        status=400,
        raw_body=j({"error": "unexpected inference input 'foo' for model 'ensemble'"}),
        headers={"content-type": "application/json"},
        error_message="unexpected inference input 'foo' for model 'ensemble'",
    ),
    Case(
        "sglang_cumulative",
        "sglang",
        [
            sgl("Hel", 1),
            sgl("Hello", 2),
            sgl("Hello", 3),  # text held back by the detokenizer: its token goes with the next event
            sgl("Hello wor", 5),
            sgl("Hello world", 6),
            DONE,
        ],
        token_events=[0, 1, 3, 4],
        chunk_tokens=[1, 1, 3, 1],
        ok=True,
        error_class=None,
        output_tokens=6,
        response_id="sg-1",
        token_source="continuous_usage",
    ),
    Case(
        "sglang_incremental",
        "sglang",
        [sgl("Hel", 1), sgl("lo", 2), sgl(" wor", 4), sgl("ld", 5), DONE],
        token_events=[0, 1, 2, 3],
        chunk_tokens=[1, 1, 2, 1],
        ok=True,
        error_class=None,
        output_tokens=5,
        response_id="sg-1",
        token_source="continuous_usage",
    ),
    Case(
        "sglang_error_event",
        "sglang",
        [sgl("Hel", 1), j({"error": {"message": "CUDA out of memory"}}), DONE],
        token_events=[0],
        chunk_tokens=[1],
        ok=False,
        error_class=R.SERVER_ERROR_EVENT,
        output_tokens=None,
        response_id="sg-1",
        error_message="CUDA out of memory",
        fail_event=1,
    ),
    Case(
        "sglang_truncated",
        "sglang",
        [sgl("Hel", 1), sgl("Hello", 2)],
        token_events=[0, 1],
        chunk_tokens=[1, 1],
        ok=False,
        error_class=R.NO_DONE,
        output_tokens=None,
        response_id="sg-1",
        error_message="the stream closed without data: [DONE] (its last meta_info has no finish_reason)",
    ),
    Case(
        "sglang_finished_without_done",
        "sglang",
        [sgl("Hel", 1), sgl("Hello", 2, finish={"type": "length", "length": 2})],
        token_events=[0, 1],
        chunk_tokens=[1, 1],
        ok=True,
        error_class=None,
        output_tokens=2,
        response_id="sg-1",
        token_source="continuous_usage",
        stream_end=R.NO_TERMINATOR,
    ),
    Case(
        "sglang_http_400",
        "sglang",
        [],
        token_events=[],
        chunk_tokens=[],
        ok=False,
        error_class="http_400",
        output_tokens=None,
        response_id=None,
        status=400,
        raw_body=j(
            {
                "object": "error",
                "message": "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
                "type": "BadRequestError",
                "code": 400,
            }
        ),
        headers={"content-type": "application/json"},
        error_message="The input (9000 tokens) is longer than the model's context length (8192 tokens).",
    ),
]
BY_NAME = {c.name: c for c in CASES}


def stream(case: Case, eol: bytes = LF) -> tuple[bytes, list[int]]:
    """The response body, and for each event the offset just past its blank line."""
    if case.raw_body is not None:
        return case.raw_body, []
    out, ends = b"", []
    for e in case.events:
        out += (e if e.startswith(b":") else b"data: " + e) + eol + eol
        ends.append(len(out))
    return out, ends


# --- running one response through an adapter ---------------------------------------------------

SPEC = R.RequestSpec(
    id=0,
    prompt="Say hello",
    messages=[{"role": "user", "content": "Say hello"}],
    prompt_tokens=5,
    output_tokens=6,
)


def send(protocol: str, resp: FakeResponse | BaseException) -> tuple[R.RequestRecord, FakeTransport]:
    fake = FakeTransport(resp)
    rec = R.RequestRecord(
        id=0,
        warmup=False,
        t_sched_ns=0,
        t_send_ns=0,
        requested_output_tokens=SPEC.output_tokens,
        requested_prompt_tokens=SPEC.prompt_tokens,
    )
    asyncio.run(make_adapter(protocol, fake).send(SPEC, rec))
    return rec, fake


def run_case(case: Case, timed: list[Read]) -> R.RequestRecord:
    rec, fake = send(case.protocol, FakeResponse(status=case.status, headers=case.headers, chunks=timed))
    (req,) = fake.requests
    assert req.method == "POST" and req.path == PATHS[case.protocol]
    assert req.json["stream"] is True
    return rec


def time_of(timed: list[Read], offset: int) -> int:
    """The arrival time of the read that holds byte ``offset`` of the body."""
    pos = 0
    for t, data in timed:
        pos += len(data)
        if offset < pos:
            return t
    raise AssertionError(f"offset {offset} is past the body's {pos} bytes")


def check(case: Case, timed: list[Read], ends: list[int]) -> None:
    """The record of ``case`` fed as ``timed``: exact fields, and each time from its read."""
    rec = run_case(case, timed)
    completed_at = [time_of(timed, end - 1) for end in ends]  # the read holding its last byte
    times = [completed_at[i] for i in case.token_events]
    got = {
        "ok": rec.ok,
        "error_class": rec.error_class,
        "chunk_tokens": rec.chunk_tokens,
        "output_tokens": rec.output_tokens,
        "response_id": rec.response_id,
        "chunk_times_ns": rec.chunk_times_ns,
        "t_first_token_ns": rec.t_first_token_ns,
        "http_status": rec.http_status,
        "t_first_byte_ns": rec.t_first_byte_ns,
    }
    want = {
        "ok": case.ok,
        "error_class": case.error_class,
        "chunk_tokens": case.chunk_tokens,
        "output_tokens": case.output_tokens,
        "response_id": case.response_id,
        "chunk_times_ns": times,
        "t_first_token_ns": times[0] if times else None,
        "http_status": case.status,
        "t_first_byte_ns": timed[0][0],
    }
    assert got == want
    if case.error_message is not None:
        assert rec.error_message == case.error_message
    if case.ok:
        assert rec.token_source == case.token_source
    if case.stream_end is not None:
        assert rec.stream_end == case.stream_end
    if case.fail_event is not None:
        assert rec.t_end_ns == completed_at[case.fail_event]
    assert rec.reasoning_times_ns == []
    if case.tools:  # every token a tool call's: timed, counted, never content
        assert rec.t_first_tool_ns == rec.t_first_token_ns and rec.t_first_content_ns is None
        assert (rec.tool_calls, rec.tool_names) == (
            (len(case.tools), list(case.tools)) if case.ok else (0, None)
        )
        assert rec.finish_reason == ("tool_calls" if case.ok else None)
    else:
        assert rec.t_first_content_ns == rec.t_first_token_ns and rec.t_first_tool_ns is None


# --- (a) one read, (b) one byte per read, (c) CRLF ---------------------------------------------


@pytest.mark.parametrize("eol", [LF, CRLF], ids=["lf", "crlf"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_one_read(case: Case, eol: bytes) -> None:
    body, ends = stream(case, eol)
    check(case, reads([body], T0, STEP), ends)


@pytest.mark.parametrize("eol", [LF, CRLF], ids=["lf", "crlf"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_byte_its_own_read(case: Case, eol: bytes) -> None:
    body, ends = stream(case, eol)
    timed = reads(split_every(body), T0, STEP)
    assert len({t for t, _ in timed}) == len(body)  # a distinct time per read
    check(case, timed, ends)


@pytest.mark.parametrize("eol", [LF, CRLF], ids=["lf", "crlf"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_single_cut(case: Case, eol: bytes) -> None:
    """Two reads, cut at each byte boundary in turn: every place an event can be split."""
    body, ends = stream(case, eol)
    for cut in range(1, len(body)):
        check(case, reads(split_at(body, [cut]), T0, STEP), ends)


@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_random_splits(data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(CASES), label="case")
    eol = data.draw(st.sampled_from([LF, CRLF]), label="eol")
    body, ends = stream(case, eol)
    cuts = data.draw(st.lists(st.integers(1, len(body) - 1), max_size=40), label="cuts")
    gaps = data.draw(
        st.lists(st.integers(1, 10**7), min_size=len(cuts) + 1, max_size=len(cuts) + 1), label="gaps"
    )
    pieces = split_at(body, cuts)
    timed, t = [], T0
    for piece, gap in zip(pieces, gaps, strict=False):
        t += gap
        timed.append((t, piece))
    check(case, timed, ends)


# --- the edges, spelled out ----------------------------------------------------------------------


def test_role_only_first_delta_is_not_a_token() -> None:
    body = b"".join(
        b"data: " + e + b"\n\n"
        for e in [chat({"role": "assistant", "content": ""}), chat({"content": "Hi"}), DONE]
    )
    rec = run_case(BY_NAME["chat"], [(100, body[:60]), (200, body[60:])])
    assert rec.chunk_times_ns == [200] and rec.chunk_tokens == [1] and rec.t_first_token_ns == 200
    assert rec.t_first_byte_ns == 100 and rec.ok


@pytest.mark.parametrize("protocol", ["chat", "sglang"])
@pytest.mark.parametrize("cut", [b"data: [", b"data: [DO", b"data: [DONE", b"data: [DONE]\n"])
def test_done_split_across_reads(protocol: str, cut: bytes) -> None:
    token = chat({"content": "Hi"}) if protocol == "chat" else sgl("Hi", 1)
    body = b"data: " + token + b"\n\n" + b"data: [DONE]\n\n"
    at = body.index(b"data: [DONE]") + len(cut)
    rec, _ = send(protocol, FakeResponse(chunks=[(10, body[:at]), (20, body[at:])]))
    assert rec.ok and rec.error_class is None
    assert rec.chunk_times_ns == [10] and rec.output_tokens == 1


@pytest.mark.parametrize("protocol", ["chat", "completions", "sglang"])
def test_done_alone_and_no_event_at_all(protocol: str) -> None:
    """A body of only [DONE] is ok with no token; one with no event at all is malformed."""
    rec, _ = send(protocol, FakeResponse(chunks=[(5, b"data: [DONE]\n\n")]))
    assert rec.ok and rec.chunk_times_ns == [] and rec.output_tokens == 0
    rec, _ = send(protocol, FakeResponse(chunks=[(5, b": ping\n\n")]))
    assert not rec.ok and rec.error_class == R.MALFORMED


@pytest.mark.parametrize("name", ["chat_finished_without_done", "sglang_finished_without_done"])
def test_require_done_fails_a_finished_stream_without_its_terminator(name: str) -> None:
    """target.require_done: the conformance check of old, a finished answer without [DONE] fails."""
    case = BY_NAME[name]
    body, _ = stream(case)
    fake = FakeTransport(FakeResponse(headers=case.headers, chunks=[(T0, body)]))
    rec = R.RequestRecord(
        id=0, warmup=False, t_sched_ns=0, t_send_ns=0, requested_output_tokens=8, requested_prompt_tokens=5
    )
    strict = TARGET.model_copy(update={"require_done": True})
    asyncio.run(make_adapter(case.protocol, fake, strict).send(SPEC, rec))
    assert (rec.ok, rec.error_class) == (False, R.NO_DONE)
    assert rec.error_message == "the stream closed without data: [DONE] (target.require_done is set)"


@pytest.mark.parametrize("name", ["chat", "sglang_cumulative", "triton"])
def test_a_stream_with_its_end_says_so(name: str) -> None:
    """Every ok stream names its end: the terminator, or (Triton's generate) the body's end."""
    rec = run_case(BY_NAME[name], reads([stream(BY_NAME[name])[0]], T0, STEP))
    assert rec.ok and rec.stream_end == (R.END_OF_BODY if name == "triton" else R.TERMINATOR)


def test_http_error_split_body_keeps_the_message() -> None:
    case = BY_NAME["chat_http_400"]
    body, _ = stream(case)
    rec = run_case(case, reads(split_every(body, 3), T0, STEP))
    assert rec.error_class == "http_400" and rec.error_message == "max_tokens is too large"
    assert rec.chunk_times_ns == [] and rec.t_first_byte_ns == T0


# --- transport failures: classify_common through the fake -----------------------------------


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (ConnectionResetError("Connection reset by peer"), R.READ),
        (StreamBroken("closed inside a chunk"), R.READ),
        (ReadTimedOut("no byte for 30.0 s"), R.TIMEOUT),
    ],
)
def test_error_mid_stream_is_classified(exc: BaseException, cls: str) -> None:
    first = b"data: " + chat({"content": "A"}) + b"\n\n"
    body = first + b"data: " + chat({"content": "B"}) + b"\n\n" + b"data: [DONE]\n\n"
    timed = reads(split_at(body, [20, len(first), len(first) + 20]), T0, STEP)
    # The connection fails after the first event's two reads and before the rest.
    rec, _ = send("chat", FakeResponse(chunks=timed, error=exc, error_after=2))
    assert not rec.ok and rec.error_class == cls
    assert rec.error_message is not None and rec.error_message.startswith(type(exc).__name__)
    assert rec.chunk_tokens == [1] and rec.chunk_times_ns == [T0 + STEP]  # what arrived stays
    assert rec.output_tokens is None


def test_connect_failure_before_any_byte() -> None:
    rec, fake = send("triton", ConnectFailed("connect to 127.0.0.1:9 refused"))
    assert rec.error_class == R.CONNECT and rec.http_status is None and rec.t_first_byte_ns is None
    assert fake.requests[0].json["text_input"] == "Say hello"


def test_consumer_stop_ends_the_feed() -> None:
    """After a failing event the adapter stops reading: later reads are never fed."""
    fed: list[bytes] = []

    class Spy:
        def head(self, status: int, headers: Any, t_ns: int) -> None:
            assert headers == {"x-request-id": "r"}  # names reach the consumer lower-cased

        def feed(self, t_ns: int, data: bytes) -> bool:
            fed.append(data)
            return len(fed) < 2

    fake = FakeTransport(FakeResponse(headers={"X-Request-Id": "r"}, chunks=reads([b"a", b"b", b"c"])))
    asyncio.run(fake.post_stream("/x", b"{}", Spy()))
    assert fed == [b"a", b"b"]


def test_get_probe_responses() -> None:
    fake = FakeTransport(
        gets={
            "/v1/models": FakeResponse.json({"object": "list", "data": [{"id": "tiny"}]}),
            "/version": ConnectionRefusedError("refused"),
        }
    )

    result = asyncio.run(registry.backend("chat").probe(fake, "http://fake", None))
    assert result.model == "tiny" and result.info["models_status"] == 200 and "version" not in result.info
    assert [r.path for r in fake.requests] == ["/v1/models", "/version"]
    assert asyncio.run(fake.get("/nope"))[0] == 404
