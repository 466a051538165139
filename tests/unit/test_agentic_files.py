"""The agentic trace readers and the agentic section of a profile: what each file says, as
parsed, and the errors that name the file, line or span, field and fix."""

from __future__ import annotations

import json
import re

import pytest

from loadgen.config import load_profile
from loadgen.errors import ConfigError
from loadgen.workload.agentic_traces import Call, read_aiperf, read_otlp
from loadgen.workload.trace_files import TraceError


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


class TestAiperf:
    def test_a_leading_system_turn_is_hoisted_and_delays_are_seconds(self, tmp_path):
        """AIPerf's own rules: a leading system turn is no turn; delay 250 ms is 0.25 s."""
        row = {
            "session_id": "s1",
            "turns": [
                {"role": "system", "text": "sys"},
                {"text": "a"},
                {"text": "b", "delay": 250, "output_length": 7},
            ],
        }
        (s,) = read_aiperf(_write(tmp_path, "c.jsonl", json.dumps(row) + "\n\n"))
        assert (s.session_id, s.system) == ("s1", "sys")
        assert [(t.text, t.delay_s, t.output_tokens) for t in s.turns] == [("a", None, None), ("b", 0.25, 7)]

    @pytest.mark.parametrize(
        ("line", "says"),
        [
            ("not json", "line 1: not valid JSON"),
            ('{"session_id": "x"}', 'line 1: expected {"session_id": ..., "turns"'),
            ('{"turns": [{"text": ""}]}', "line 1 turn 0: text must be a non-empty string"),
            (
                '{"turns": [{"text": "a", "output_length": 0}]}',
                "line 1 turn 0: output_length is 0, expected a positive integer",
            ),
        ],
    )
    def test_a_bad_line_is_named(self, tmp_path, line, says):
        with pytest.raises(TraceError, match=re.escape(f"c.jsonl {says}")):
            read_aiperf(_write(tmp_path, "c.jsonl", line + "\n"))


def _span(sid, start, end, parent="ag", **attrs):
    kv = [
        {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
        for k, v in attrs.items()
    ]
    return {
        "traceId": "t",
        "spanId": sid,
        "parentSpanId": parent,
        "startTimeUnixNano": str(start * 10**6),
        "endTimeUnixNano": str(end * 10**6),
        "attributes": kv,
    }


def _llm(sid, start, end, prompt, output, parent="ag", **more):
    return _span(
        sid,
        start,
        end,
        parent,
        **{"gen_ai.operation.name": "chat", "gen_ai.prompt": prompt, "gen_ai.completion": output, **more},
    )


def _export(*spans):
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]})


class TestOtlp:
    def test_calls_wait_for_earlier_siblings_and_for_outputs_they_repeat(self, tmp_path):
        """Under one parent a call waits for every sibling that ended before it started (the
        overlapping two ran in parallel); under another parent, only for a call whose recorded
        output its input repeats. Gaps are after the last parent's end; a tool span is no call."""
        spans = [
            _llm("p", 0, 100, "plan", "PLAN"),
            _span("tool", 100, 150, **{"gen_ai.operation.name": "execute_tool"}),
            _llm("a", 200, 300, "do A of PLAN", "A-OUT", **{"gen_ai.usage.output_tokens": 9}),
            _llm("b", 250, 350, "do B", "B-OUT"),
            _llm("x", 400, 450, "check A-OUT", "fine", parent="other"),
        ]
        (calls,) = read_otlp(_write(tmp_path, "t.json", _export(*spans)))
        assert calls == [
            Call("p", (), ({"role": "user", "content": "plan"},), "PLAN", None, 0.0),
            Call("a", (0,), ({"role": "user", "content": "do A of PLAN"},), "A-OUT", 9, 0.1),
            Call("b", (0,), ({"role": "user", "content": "do B"},), "B-OUT", None, 0.15),
            Call("x", (1,), ({"role": "user", "content": "check A-OUT"},), "fine", None, 0.1),
        ]

    def test_a_json_lines_export_and_parts_messages_are_read(self, tmp_path):
        """The Collector's file exporter writes a document a line; the newer convention's
        messages carry parts, and a tool role is sent as the user's."""
        msgs = json.dumps([{"role": "tool", "parts": [{"type": "tool_call_response", "response": "42"}]}])
        one = _export(_span("c", 0, 10, **{"gen_ai.operation.name": "chat", "gen_ai.input.messages": msgs}))
        other = _export({**_llm("d", 0, 10, "hi", "yo"), "traceId": "u"})
        graphs = read_otlp(_write(tmp_path, "t.jsonl", one + "\n" + other + "\n"))
        assert [[c.messages for c in g] for g in graphs] == [
            [({"role": "user", "content": "42"},)],
            [({"role": "user", "content": "hi"},)],
        ]

    def test_an_export_without_llm_calls_says_what_it_looks_for(self, tmp_path):
        with pytest.raises(
            TraceError, match=re.escape("no LLM calls; expected spans with gen_ai.input.messages")
        ):
            read_otlp(_write(tmp_path, "t.json", _export(_span("a", 0, 1))))

    def test_a_span_without_times_is_named(self, tmp_path):
        span = _llm("c", 0, 1, "x", "y")
        del span["endTimeUnixNano"]
        with pytest.raises(TraceError, match="trace t span c: startTimeUnixNano and endTimeUnixNano"):
            read_otlp(_write(tmp_path, "t.json", _export(span)))

    def test_a_document_that_is_no_export_is_named(self, tmp_path):
        with pytest.raises(TraceError, match=r'expected an OTLP JSON export \{"resourceSpans"'):
            read_otlp(_write(tmp_path, "t.json", "[]"))


class TestProfile:
    def _load(self, **agentic):
        return load_profile(
            None, overrides={"workload.num_requests": 4, "load.concurrency": 1, "workload.agentic": agentic}
        )

    def test_a_trace_kind_needs_its_path(self):
        with pytest.raises(
            ConfigError, match=re.escape("workload.agentic.path: kind aiperf replays a trace file")
        ):
            self._load(kind="aiperf")

    def test_agentic_takes_no_user_sessions(self):
        with pytest.raises(ConfigError, match="sessions: agentic sessions build their own requests"):
            load_profile(
                None,
                overrides={
                    "workload.num_requests": 4,
                    "load.concurrency": 1,
                    "workload.agentic": {"kind": "code_session"},
                    "workload.sessions": {},
                },
            )

    def test_tool_time_takes_bare_seconds(self):
        t = self._load(kind="code_session", tool_time_s=0.5).workload.agentic.tool_time_s
        assert (t.kind, t.value) == ("fixed", 0.5)

    def test_it_runs_in_one_process(self):
        with pytest.raises(ConfigError, match=re.escape("client.workers: 1")):
            load_profile(
                None,
                overrides={
                    "workload.num_requests": 4,
                    "load.concurrency": 1,
                    "client.workers": 2,
                    "workload.agentic": {"kind": "tool_rounds"},
                },
            )
