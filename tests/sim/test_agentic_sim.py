"""Agentic sessions end to end on the built-in simulator: a generated tool-call session and an
OTLP trace DAG replay run with their rounds in order by the server's own log (each round
arrives after its predecessors' last token plus its pause), and the summary's agentic block
counts them exactly and carries the prefix-cache hit the simulator's /metrics counted."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from loadgen.records import read_records
from loadgen.result import GROUND_TRUTH, REQUESTS
from loadgen.workload import Workload

import helpers


def _run(tmp_path: Path, agentic: dict, n: int, **kw: object) -> tuple:
    prof = helpers.profile(
        tmp_path,
        None,
        sim={"time_scale": 0.05, "seed": 3},
        workload__num_requests=n,
        workload__output_tokens=12,
        load__warmup_requests=0,
        workload__agentic=agentic,
        **kw,
    )
    res = helpers.run(prof)
    records = sorted(read_records(res.run_dir / REQUESTS), key=lambda r: (r.session_id, r.turn))
    truth = {d["id"]: d for d in map(orjson.loads, (res.run_dir / GROUND_TRUTH).read_bytes().splitlines())}
    return prof, res, records, truth


def test_a_generated_tool_session_runs_its_rounds_in_order(tmp_path):
    """3 sessions of 4 rounds, exponential tool time (mean 10 ms): every round arrives at the
    simulator after its predecessor's last token plus the round's own draw; 12 rounds, 3
    sessions of 4, and the block's prefix-cache hit is the server block's (later rounds resend
    the history, so some of it hits)."""
    agentic = {"kind": "tool_rounds", "rounds": 4, "tool_time_s": {"kind": "exponential", "mean": 0.01}}
    prof, res, records, truth = _run(tmp_path, agentic, 12, load__concurrency=3)
    plan = Workload(prof.workload, "chat").sessions
    assert len(records) == 12 and all(r.ok for r in records)
    by_session: dict[int, list] = {}
    for r in records:
        by_session.setdefault(r.session_id, []).append(r)
    assert {s: [r.turn for r in v] for s, v in by_session.items()} == {s: [1, 2, 3, 4] for s in range(3)}
    for rounds in by_session.values():
        for prev, r in zip(rounds, rounds[1:]):
            pause_ns = int(plan.think_s(r.session_id, r.turn) * 1e9)
            assert truth[r.response_id]["arrival_ns"] >= truth[prev.response_id]["chunk_ns"][-1] + pause_ns
            assert r.prompt_tokens > prev.prompt_tokens  # the history grew
    a, server = res.summary["agentic"], res.summary["server"]
    assert (a["sessions"], a["rounds"], a["rounds_per_session"]["max"]) == (3, 12, 4.0)
    assert a["prefix_cache"] == {"hit_rate": server["prefix_cache"]["hit_rate"], "source": "server /metrics"}
    assert a["prefix_cache"]["hit_rate"] > 0
    # the conditions say what shaped the prompts: agent sessions, not plain synthetic prompts
    agentic_conditions = res.summary["conditions"]["traffic"]["agentic"]
    assert agentic_conditions["kind"] == "tool_rounds" and agentic_conditions["tool_time_s"]["mean"] == 0.01
    assert agentic_conditions["rounds"] == {"kind": "fixed", "value": 4}


def _llm(sid: str, start_ms: int, end_ms: int, prompt: str, output: str) -> dict:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps([{"role": "user", "content": prompt}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": output}]),
    }
    return {
        "traceId": "t",
        "spanId": sid,
        "parentSpanId": "agent",
        "startTimeUnixNano": str(start_ms * 1_000_000),
        "endTimeUnixNano": str(end_ms * 1_000_000),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


def test_a_trace_dag_replays_children_after_all_their_parents(tmp_path):
    """A fan-out and fan-in (plan; two workers; a merge), twice (the trace cycles): each call
    arrives after every parent's last token plus its recorded gap times 0.1."""
    spans = [
        _llm("p", 0, 500, "plan the change", "PLAN"),
        _llm("a", 600, 900, "first half of PLAN", "HALF-A"),
        _llm("b", 700, 1000, "second half of PLAN", "HALF-B"),
        _llm("m", 1100, 1300, "merge HALF-A and HALF-B", "ok"),
    ]
    path = tmp_path / "otlp.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    agentic = {"kind": "otlp", "path": str(path), "time_scale": 0.1}
    prof, res, records, truth = _run(
        tmp_path, agentic, 8, load__concurrency=None, load__rate=4, load__arrival="constant"
    )
    plan = Workload(prof.workload, "chat").sessions
    assert plan.nodes(0) == [(), (0,), (0,), (0, 1, 2)]
    assert [(r.session_id, r.turn) for r in records] == [(s, k) for s in (0, 1) for k in (1, 2, 3, 4)]
    for s in (0, 1):
        calls = [r for r in records if r.session_id == s]
        for k, parents in enumerate(plan.nodes(s)):
            for p in parents:
                pause_ns = int(plan.think_s(s, k) * 1e9)
                assert (
                    truth[calls[k].response_id]["arrival_ns"]
                    >= truth[calls[p].response_id]["chunk_ns"][-1] + pause_ns
                )
    a = res.summary["agentic"]
    assert (a["kind"], a["sessions"], a["rounds"], a["failed_rounds"]) == ("otlp", 2, 8, 0)
