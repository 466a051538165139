"""The simulator's Responses and Messages streams, and its reasoning tokens, over loopback: the
events each provider documents, in order, with the prompt counted as chat's."""

from __future__ import annotations

import httpx
import orjson
import pytest

from loadgen.sim import SimConfig
from loadgen.sim.text import CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_PER_REQUEST

from .helpers import ThreadedSim

PROMPT_TOKENS = 3 + CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_PER_REQUEST  # "one two three", one message


@pytest.fixture(scope="module")
def thinking():
    """The simulator with a 2-token think phase, at 20x wall speed."""
    s = ThreadedSim(SimConfig(time_scale=0.05, seed=7, reasoning_tokens=2))
    with httpx.Client(base_url=s.url, timeout=10) as c:
        yield c
    s.close()


def stream(client, path: str, body: dict, headers: dict | None = None) -> list[dict]:
    """The data payloads of one streamed answer, each checked against its ``event:`` line."""
    out, name = [], None
    with client.stream("POST", path, json={"stream": True, **body}, headers=headers or {}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                obj = orjson.loads(line[6:])
                assert name is None or obj["type"] == name
                out.append(obj)
    return out


def test_responses_stream_reasoning_then_text_then_completed(thinking):
    """created, in_progress, a reasoning item of 2 deltas, a message item of 3, and
    response.incomplete (cut at max_output_tokens) with the usage."""
    ev = stream(
        thinking, "/v1/responses", {"input": "one two three", "max_output_tokens": 5, "ignore_eos": True}
    )
    types = [e["type"] for e in ev]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert (
        types.count("response.reasoning_text.delta") == 2 and types.count("response.output_text.delta") == 3
    )
    assert types.index("response.reasoning_text.delta") < types.index("response.output_text.delta")
    assert [e["sequence_number"] for e in ev] == list(range(1, len(ev) + 1))
    last = ev[-1]
    assert last["type"] == "response.incomplete" and last["response"]["id"].startswith("resp-sim-")
    assert last["response"]["usage"]["input_tokens"] == PROMPT_TOKENS
    assert last["response"]["usage"]["output_tokens"] == 5
    assert last["response"]["usage"]["output_tokens_details"] == {"reasoning_tokens": 2}


def test_messages_stream_thinking_then_text_blocks(thinking):
    """message_start with input tokens, a thinking block of 2 deltas, a text block of 3,
    message_delta with output tokens, message_stop."""
    ev = stream(
        thinking,
        "/v1/messages",
        {"messages": [{"role": "user", "content": "one two three"}], "max_tokens": 5},
    )
    assert ev[0]["type"] == "message_start" and ev[0]["message"]["usage"]["input_tokens"] == PROMPT_TOKENS
    deltas = [e["delta"]["type"] for e in ev if e["type"] == "content_block_delta"]
    assert deltas == ["thinking_delta"] * 2 + ["text_delta"] * 3
    starts = [e["content_block"]["type"] for e in ev if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    assert [e["type"] for e in ev[-2:]] == ["message_delta", "message_stop"]
    assert ev[-2]["usage"] == {"output_tokens": 5} and ev[-2]["delta"]["stop_reason"] == "max_tokens"


def test_chat_streams_the_think_phase_as_reasoning_content(thinking):
    """With reasoning_tokens the first tokens of a chat answer are reasoning_content."""
    body = {"messages": [{"role": "user", "content": "one two three"}], "max_tokens": 4}
    with thinking.stream("POST", "/v1/chat/completions", json={"stream": True, **body}) as r:
        lines = [orjson.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
    keys = [next(iter(e["choices"][0]["delta"])) for e in lines[1:] if e["choices"]]
    assert keys == ["reasoning_content", "reasoning_content", "content", "content"]


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages"])
def test_the_hosted_apis_are_served_streamed_only(thinking, path):
    """A non-streamed request is a 400 that says so."""
    r = thinking.post(
        path, json={"input": "x", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    )
    assert r.status_code == 400 and "stream: true" in r.json()["message"]
