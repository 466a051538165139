"""Tool calls against the scripted and hostile servers: each tool-call piece a timed chunk
stamped after the server sent it, a second round that carries the call and the tool's result
as the server received them, and each malformed tool-call shape classed, never a traceback."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen import records as R
from loadgen.records import read_records
from loadgen.result import REQUESTS
from loadgen.testing.hostile import HostileServer

from helpers import run

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]


def script(**behaviour):
    """target.extra_body that scripts the test server (a top-level ``loadgen_test`` field)."""
    return {"target__extra_body": {"loadgen_test": behaviour}}


def test_tool_call_pieces_are_timed_chunks_after_the_servers_stamps(server, make_profile):
    """8 tokens of a call of `search`: 8 chunks, each stamped no earlier than the server wrote
    it, the first the time to the first tool-call token; finish_reason tool_calls; usage 8."""
    res = run(
        make_profile(
            server.url,
            workload__num_requests=4,
            workload__output_tokens=8,
            workload__tools={"functions": TOOLS, "choice": "required"},
            **script(tool_call="search"),
        )
    )
    log = server.log()
    assert res.summary["counts"]["ok"] == 4
    for r in read_records(res.run_dir / REQUESTS):  # the names are in the file, not the table
        gt = log[r.response_id]
        assert gt["tool_call"] == "search"
        assert (r.tool_calls, r.tool_names, r.finish_reason) == (1, ["search"], "tool_calls")
        assert r.output_tokens == sum(gt["chunk_tokens"]) == sum(r.chunk_tokens) == 8
        assert len(r.chunk_times_ns) == len(gt["chunk_ns"]) == 8
        assert np.all(np.array(r.chunk_times_ns) >= np.array(gt["chunk_ns"]))
        assert r.t_first_tool_ns == r.chunk_times_ns[0] and r.t_first_content_ns is None
        assert gt["answer"] == ""  # no content text: the call is no answer text
    assert res.summary["metrics"]["ttft_tool_ms"]["count"] == 4


def test_the_second_round_carries_the_call_and_the_tool_result(server, make_profile):
    """rounds: 2: round 2's messages, as the server received them, are round 1's, then the
    assistant's tool call with the arguments the server streamed (6 tokens: the name, then
    `{"q": "`, three words and `"}`; its id included), then a tool message answering that id
    with a 12-word result; round 2 is answered in text."""
    res = run(
        make_profile(
            server.url,
            load__concurrency=1,
            workload__num_requests=2,
            workload__output_tokens=6,
            workload__tools={"functions": TOOLS, "rounds": 2, "result_tokens": 12},
            **script(tool_call="search"),
        )
    )
    log = server.log()
    first, second = sorted(res.records, key=lambda r: r.turn)
    assert (first.turn, second.turn, first.session_id) == (1, 2, second.session_id)
    g1, g2 = log[first.response_id], log[second.response_id]
    call_id = f"call_{first.response_id}"
    assert [m["role"] for m in g2["messages"]] == ["user", "assistant", "tool"]
    assert g2["messages"][0] == g1["messages"][0]
    assistant, tool = g2["messages"][1:]
    assert assistant["content"] is None
    assert assistant["tool_calls"] == [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": "search", "arguments": '{"q": " alpha beta gamma"}'},
        }
    ]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"q": " alpha beta gamma"}
    assert tool["tool_call_id"] == call_id and len(tool["content"].split()) == 12
    assert (second.finish_reason, second.tool_calls) == ("length", 0)
    assert g2.get("tool_call") is None and len(g2["answer"].split()) == 6


@pytest.mark.parametrize(
    "mode,cls,message",
    [
        ("tool_no_index", R.MALFORMED, "a tool_calls piece without a valid index"),
        ("tool_args_not_string", R.MALFORMED, "tool call 0's function.arguments is dict, not a string"),
        ("tool_cut_mid_call", R.NO_DONE, "(inside tool call 0 (get_weather, 16 characters of arguments))"),
    ],
)
def test_each_malformed_tool_call_is_classed(make_profile, mode, cls, message):
    """A piece without its index, arguments that are not a string, a stream that ends inside
    a call: each request a classed record saying what was wrong, the server unharmed."""
    with HostileServer(mode) as srv:
        res = run(make_profile(srv.url, workload__num_requests=2, workload__output_tokens=4))
        assert srv.errors == []
    assert {(r.ok, r.error_class) for r in res.records} == {(False, cls)}
    for r in res.records:
        assert message in r.error_message, r.error_message
        assert r.t_first_tool_ns == r.chunk_times_ns[0]  # the name came before the fault
