"""Agentic rounds against the scripted server, whose log keeps the messages each request carried
and when it received it and ended its answer: a round goes out only after its predecessors'
answers and the drawn pause, the history grows by exactly the answers and the harness's
messages, and a trace DAG's calls wait for all their parents and carry their real answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.records import read_records
from loadgen.result import REQUESTS
from loadgen.testing import StreamServer
from loadgen.testing.openai_stream import tool_script
from loadgen.workload import Workload
from loadgen.workload.sessions import Turn

from helpers import profile, run


@pytest.fixture(scope="module")
def calls_tools():
    """The scripted server: every chat answer calls read_file, except the answer to a tool result."""
    with StreamServer(ttft_ms=1, itl_ms=1, tool_call="read_file") as s:
        yield s


@pytest.fixture(scope="module")
def texts():
    with StreamServer(ttft_ms=1, itl_ms=1) as s:
        yield s


def _run(tmp_path: Path, server: StreamServer, n: int, agentic: dict, **kw: object) -> tuple:
    server.clear_log()
    prof = profile(
        tmp_path,
        server.url,
        workload__num_requests=n,
        load__warmup_requests=0,
        workload__agentic=agentic,
        **kw,
    )
    res = run(prof)
    records = sorted(read_records(res.run_dir / REQUESTS), key=lambda r: (r.session_id, r.turn))
    return prof, res, records, server.log()


def _sessions(records: list) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in records:
        out.setdefault(r.session_id, []).append(r)
    return out


def _assert_waited(rounds: list, log: dict, think_s) -> None:
    """Round k+1 left after round k's end plus its pause, by the client's and the server's clocks."""
    for prev, r in zip(rounds, rounds[1:]):
        pause_ns = int(think_s(r.session_id, r.turn) * 1e9)
        assert r.t_sched_ns >= prev.t_end_ns + pause_ns
        assert r.t_send_ns >= prev.t_end_ns + pause_ns
        assert log[r.response_id]["recv_ns"] >= log[prev.response_id]["end_ns"] + pause_ns


def test_tool_rounds_wait_for_the_answer_and_the_tool_time(tmp_path, calls_tools):
    """4 sessions of 3 rounds at c=2: 12 rounds, each sent after its predecessor's end plus the
    tool time drawn for it (uniform 20-50 ms, the plan's own draws from the seed)."""
    agentic = {
        "kind": "tool_rounds",
        "rounds": 3,
        "tool_time_s": {"kind": "uniform", "min": 0.02, "max": 0.05},
    }
    prof, res, records, log = _run(tmp_path, calls_tools, 12, agentic)
    plan = Workload(prof.workload, "chat").sessions
    sessions = _sessions(records)
    assert len(records) == 12 and all(r.ok for r in records)
    assert sorted(sessions) == [0, 1, 2, 3] and all(
        [r.turn for r in v] == [1, 2, 3] for v in sessions.values()
    )
    draws = {plan.think_s(s, t) for s in range(4) for t in (2, 3)}
    assert len(draws) == 8 and all(0.02 <= d <= 0.05 for d in draws)
    for rounds in sessions.values():
        _assert_waited(rounds, log, plan.think_s)
    a = res.summary["agentic"]
    assert (a["kind"], a["sessions"], a["rounds"], a["failed_rounds"]) == ("tool_rounds", 4, 12, 0)
    assert a["rounds_per_session"] == {"mean": 3.0, "p50": 3.0, "p99": 3.0, "max": 3.0}
    assert a["tool_wait_s"]["p50"] >= 0.04  # two pauses of at least 20 ms each session


def test_the_history_grows_by_exactly_the_answers(tmp_path, calls_tools):
    """Each round sends the previous round's messages unchanged, then the answer the server
    really gave (a read_file call with the arguments it streamed, or its text), then the
    harness's part: the call's drawn result, or the next instruction after a text answer."""
    agentic = {"kind": "tool_rounds", "rounds": 4, "result_tokens": 12}
    prof, _res, records, log = _run(tmp_path, calls_tools, 8, agentic)
    plan = Workload(prof.workload, "chat").sessions
    for s, rounds in _sessions(records).items():
        sent = [log[r.response_id]["messages"] for r in rounds]
        assert [m["role"] for m in sent[0]] == ["user"]
        for k, (prev, r) in enumerate(zip(rounds, rounds[1:]), 1):
            before, now = sent[k - 1], sent[k]
            assert now[: len(before)] == before
            said = log[prev.response_id]
            turn = Turn("", 0, said["answer"], prev.output_tokens)
            if said.get("tool_call"):
                call = now[len(before)]["tool_calls"][0]
                assert call["function"] == {
                    "name": "read_file",
                    "arguments": "".join(tool_script(prev.output_tokens)),
                }
                turn.tool_calls = (
                    {"id": call["id"], "name": "read_file", "arguments": call["function"]["arguments"]},
                )
            expected, tokens = plan.added(s, k, turn)
            assert now[len(before) :] == expected
            assert r.prompt_tokens is not None
    # The rounds alternate: a call, then the answer to its result (text), then a call again.
    assert [bool(log[r.response_id].get("tool_call")) for r in _sessions(records)[0]] == [
        True,
        False,
        True,
        False,
    ]


def test_a_code_session_appends_the_answer_and_its_messages(tmp_path, texts):
    """code_session, 3 messages a round: round k+1 = round k + the answer + 3 user messages."""
    agentic = {"kind": "code_session", "rounds": 3, "messages": 3, "result_tokens": 10, "tool_time_s": 0.01}
    prof, res, records, log = _run(tmp_path, texts, 6, agentic)
    plan = Workload(prof.workload, "chat").sessions
    for s, rounds in _sessions(records).items():
        _assert_waited(rounds, log, plan.think_s)
        sent = [log[r.response_id]["messages"] for r in rounds]
        assert [len(m) for m in sent] == [1, 5, 9]
        for k, prev in enumerate(rounds[:-1], 1):
            tail = sent[k][len(sent[k - 1]) :]
            assert tail[0] == {"role": "assistant", "content": log[prev.response_id]["answer"]}
            assert (
                tail == plan.added(s, k, Turn("", 0, log[prev.response_id]["answer"], prev.output_tokens))[0]
            )
    assert res.summary["agentic"]["sessions"] == 2


def test_an_aiperf_multi_turn_file_replays_with_its_delays(tmp_path, texts):
    """AIPerf multi_turn JSONL: a leading system turn goes before every turn; turn 2 waits its
    delay (ms, times time_scale 0.5) after turn 1's answer and carries that answer."""
    path = tmp_path / "conv.jsonl"
    rows = [
        {
            "session_id": "a",
            "turns": [
                {"role": "system", "text": "Be brief."},
                {"text": "Hi there"},
                {"text": "More", "delay": 60},
            ],
        },
        {"session_id": "b", "turns": [{"text": "One", "output_length": 3}, {"text": "Two", "delay": 40}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agentic = {"kind": "aiperf", "path": str(path), "time_scale": 0.5}
    prof, res, records, log = _run(tmp_path, texts, 4, agentic, load__concurrency=1)
    a, b = _sessions(records).values()
    assert [log[r.response_id]["messages"] for r in a] == [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": log[a[0].response_id]["answer"]},
            {"role": "user", "content": "More"},
        ],
    ]
    assert len(log[b[0].response_id]["answer"].split()) == 3  # its output_length
    plan = Workload(prof.workload, "chat").sessions
    assert (plan.think_s(0, 2), plan.think_s(1, 2)) == (0.03, 0.02)
    for rounds in (a, b):
        _assert_waited(rounds, log, plan.think_s)


def _span(sid: str, start_ms: int, end_ms: int, parent: str = "ag", **attrs: object) -> dict:
    kv = [{"key": k.replace("_", "."), "value": {"stringValue": v}} for k, v in attrs.items()]
    return {
        "traceId": "t1",
        "spanId": sid,
        "parentSpanId": parent,
        "startTimeUnixNano": str(start_ms * 1_000_000),
        "endTimeUnixNano": str(end_ms * 1_000_000),
        "attributes": kv,
    }


def _llm(sid: str, start_ms: int, end_ms: int, prompt: str, output: str) -> dict:
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": prompt}]}])
    out = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": output}]}])
    span = _span(sid, start_ms, end_ms, gen_ai_operation_name="chat")
    span["attributes"] += [
        {"key": "gen_ai.input.messages", "value": {"stringValue": messages}},
        {"key": "gen_ai.output.messages", "value": {"stringValue": out}},
    ]
    return span


# An open loop (one session arrival every 0.5 s) and a closed loop of one session at a time: in
# both the parallel workers overlap (a closed loop's pool is not capped at one connection a slot
# for a DAG, or they would queue behind each other inside the client).
DAG_LOADS = {
    "open": {"load__concurrency": None, "load__rate": 2, "load__arrival": "constant"},
    "closed": {"load__concurrency": 1},
}


@pytest.mark.parametrize("loop", DAG_LOADS)
def test_a_trace_dag_sends_children_after_all_parents_with_their_answers(tmp_path, texts, loop):
    """A plan, two parallel workers reading it, a summary reading both (and a tool span, not an
    LLM call): each worker is received after the plan's answer ended plus its recorded gap
    (times 0.1), the summary after both workers'; each input has the parents' recorded output
    replaced by the server's real answer."""
    spans = [
        _span("ag", 0, 4000, parent="", gen_ai_operation_name="invoke_agent"),
        _llm("p", 0, 1000, "Plan the fix", "PLAN-X"),
        _span("tool", 1000, 1100, gen_ai_operation_name="execute_tool"),
        _llm("w1", 1200, 2000, "Do part one of PLAN-X", "ONE-OUT"),
        _llm("w2", 1300, 2100, "Do part two of PLAN-X", "TWO-OUT"),
        _llm("s", 2500, 3000, "Merge ONE-OUT with TWO-OUT", "done"),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    agentic = {"kind": "otlp", "path": str(path), "time_scale": 0.1}
    prof, res, records, log = _run(tmp_path, texts, 4, agentic, workload__output_tokens=40, **DAG_LOADS[loop])
    assert [(r.session_id, r.turn) for r in records] == [(0, 1), (0, 2), (0, 3), (0, 4)]
    p, w1, w2, s = (log[r.response_id] for r in records)
    plan = Workload(prof.workload, "chat").sessions
    assert plan.nodes(0) == [(), (0,), (0,), (0, 1, 2)]
    assert [round(plan.think_s(0, k), 6) for k in range(4)] == [0.0, 0.02, 0.03, 0.04]
    assert w1["recv_ns"] >= p["end_ns"] + 20_000_000 and w2["recv_ns"] >= p["end_ns"] + 30_000_000
    assert s["recv_ns"] >= max(w1["end_ns"], w2["end_ns"]) + 40_000_000
    assert w1["recv_ns"] < w2["end_ns"] and w2["recv_ns"] < w1["end_ns"]  # the workers overlapped
    assert w1["messages"] == [{"role": "user", "content": f"Do part one of {p['answer']}"}]
    assert w2["messages"] == [{"role": "user", "content": f"Do part two of {p['answer']}"}]
    assert s["messages"] == [{"role": "user", "content": f"Merge {w1['answer']} with {w2['answer']}"}]
    a = res.summary["agentic"]
    assert (a["kind"], a["sessions"], a["rounds"]) == ("otlp", 1, 4)


def test_tools_rounds_wait_the_tool_time_too(tmp_path, calls_tools):
    """workload.tools with rounds: 2 and think_time_s (exponential, mean 30 ms), one at a time: the round that
    carries the tool's result leaves after the call's end plus that conversation's draw, and
    the agentic block counts the conversations (kind tools)."""
    calls_tools.clear_log()
    tools = {"functions": [{"type": "function", "function": {"name": "read_file"}}], "rounds": 2}
    tools["think_time_s"] = {"kind": "exponential", "mean": 0.03}
    one = {"load__concurrency": 1, "load__warmup_requests": 0}
    prof = profile(tmp_path, calls_tools.url, workload__num_requests=6, workload__tools=tools, **one)
    res = run(prof)
    records = sorted(read_records(res.run_dir / REQUESTS), key=lambda r: (r.session_id, r.turn))
    plan = Workload(prof.workload, "chat").sessions
    sessions = _sessions(records)
    assert [[r.turn for r in v] for v in sessions.values()] == [[1, 2]] * 3
    assert len({plan.think_s(s, 2) for s in sessions}) == 3
    for rounds in sessions.values():
        _assert_waited(rounds, calls_tools.log(), plan.think_s)
    assert (res.summary["agentic"]["kind"], res.summary["agentic"]["sessions"]) == ("tools", 3)
