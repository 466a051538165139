"""An agent's requests on the client side: workload.tools and workload.response_format as the
profile takes them (inline or from a file, checked once), the chat body that carries them, the
plan of tool rounds, and the validation of a structured answer."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from loadgen import records as R
from loadgen.backends import registry
from loadgen.backends.stream import Live
from loadgen.config import ConfigError, TargetConfig, WorkloadConfig, load_profile
from loadgen.quality.structured import json_valid
from loadgen.testing.fake_transport import FakeResponse, FakeTransport, reads
from loadgen.workload import Workload
from loadgen.workload.sessions import Turn

AGENT = Path(__file__).parents[1] / "fixtures" / "agent"
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["answer", "n"],
}
FN = {"type": "function", "function": {"name": "search", "parameters": SCHEMA}}


def problems(tmp_path: Path, workload: str, extra: str = "") -> list[str]:
    for name in ("weather_tools.yaml", "answer.schema.json"):
        shutil.copy(AGENT / name, tmp_path / name)
    path = tmp_path / "p.yaml"
    path.write_text(f"workload: {{num_requests: 2, {workload}}}\nload: {{concurrency: 1}}\n{extra}")
    try:
        load_profile(path)
    except ConfigError as exc:
        return exc.problems
    return []


class TestProfile:
    def test_tools_from_a_file_relative_to_the_profile(self, tmp_path):
        """`tools: weather_tools.yaml` is `{file: ...}` beside the profile: its two functions."""
        for name in ("weather_tools.yaml", "answer.schema.json"):
            shutil.copy(AGENT / name, tmp_path / name)
        path = tmp_path / "p.yaml"
        path.write_text(
            "workload: {num_requests: 2, tools: weather_tools.yaml,"
            " response_format: {json_schema: {name: answer, file: answer.schema.json}}}\n"
            "load: {concurrency: 1}\n"
        )
        work = load_profile(path).workload
        assert work.tools is not None and work.tools.names == ("get_weather", "get_time")
        assert work.tools.tool_choice() == "auto" and work.tools.rounds == 1
        assert work.response_format is not None
        assert work.response_format.body()["json_schema"]["schema"]["required"] == [
            "answer",
            "confidence",
            "sources",
        ]

    @pytest.mark.parametrize(
        "workload,extra,problem",
        [
            (
                "tools: {file: weather_tools.yaml, choice: get_nothing}",
                "",
                "workload.tools.choice: 'get_nothing' is no listed function; valid: auto, required, none, "
                "get_weather, get_time",
            ),
            (
                "tools: weather_tools.yaml",
                "target: {endpoint: completions}\n",
                "workload: tools: endpoint completions sends none; use chat",
            ),
            (
                "response_format: {json_schema: {name: a, schema: {type: objekt}}}",
                "",
                "workload.response_format.json_schema.schema: not a valid JSON schema: 'objekt' is not valid "
                "under any of the given schemas",
            ),
            (
                "tools: [{type: function, function: {name: a}}, {type: function, function: {name: a}}]",
                "",
                "workload.tools.functions: function names must be unique; repeated: a",
            ),
            (
                "tools: {file: weather_tools.yaml, rounds: 2}, sessions: {turns: 2}",
                "",
                "workload.sessions: send no tools or response_format yet; an agent's conversation is "
                "tools.rounds, remove sessions",
            ),
            (
                "tools: {functions: [{type: function, function: {name: a}}], choice: none, rounds: 2}",
                "",
                "workload.tools.rounds: choice: none calls no tool, so there is no second round",
            ),
        ],
    )
    def test_a_bad_agent_section_names_its_path(self, tmp_path, workload, extra, problem):
        """Each mistake is one problem at its YAML path, saying what would be valid."""
        assert problems(tmp_path, workload, extra) == [problem]

    def test_tool_rounds_run_in_one_process(self, tmp_path):
        got = problems(tmp_path, "tools: {file: weather_tools.yaml, rounds: 2}", "client: {workers: 2}\n")
        assert len(got) == 1 and "tool rounds run in one process" in got[0]


class TestRequests:
    def test_the_chat_body_carries_tools_choice_and_format(self):
        """Every request of the workload sends the tools, a named choice as OpenAI spells it,
        and the response_format."""
        cfg = WorkloadConfig.model_validate(
            {
                "num_requests": 2,
                "tools": {"functions": [FN], "choice": "search"},
                "response_format": {"json_schema": {"name": "a", "schema": SCHEMA}},
            }
        )
        spec = Workload(cfg, "chat").request(1)
        fake = FakeTransport(FakeResponse(headers={"content-type": "text/event-stream"}, chunks=reads([b""])))
        target = TargetConfig(timeout_s=60.0)
        rec = R.RequestRecord(1, False, 0, 0, spec.output_tokens, spec.prompt_tokens)
        asyncio.run(registry.backend("chat").for_target(target, "m", fake, Live()).send(spec, rec))
        (req,) = fake.requests
        assert req.json["tools"] == [FN]
        assert req.json["tool_choice"] == {"type": "function", "function": {"name": "search"}}
        assert req.json["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": SCHEMA, "strict": True},
        }

    def test_round_two_sends_the_call_and_a_deterministic_result(self):
        """Round 2 of conversation 3: round 1's messages, the assistant's call, one tool message
        per call of result_tokens words (the same text every time it is built), as request i."""
        cfg = WorkloadConfig.model_validate(
            {"num_requests": 4, "tools": {"functions": [FN], "rounds": 3, "result_tokens": 7}}
        )
        w = Workload(cfg, "chat")
        plan = w.sessions
        assert plan is not None and plan.turns(3) == 3 and plan.think_s(3, 2) == 0.0
        first, _ = plan.spec(10, 3, 1, [])
        assert first.messages == w.single(3).messages and (first.id, first.turn, first.session_id) == (
            10,
            1,
            3,
        )
        turn = Turn("", 0, "", 5)
        turn.tool_calls = ({"id": "c1", "name": "search", "arguments": '{"answer": "x", "n": 1}'},)
        second, _ = plan.spec(11, 3, 2, [turn])
        assert second.messages is not None and first.messages is not None
        assistant, tool = second.messages[len(first.messages) :]
        assert assistant == {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"answer": "x", "n": 1}'},
                }
            ],
        }
        assert tool["role"] == "tool" and tool["tool_call_id"] == "c1" and len(tool["content"].split()) == 7
        assert tool == plan.spec(11, 3, 2, [turn])[0].messages[-1]
        assert second.prompt_tokens == first.prompt_tokens + 5 + 7
        assert second.tools == first.tools == (FN,)
        assert plan.goes_on(turn.tool_calls) and not plan.goes_on(())


class TestJsonValid:
    @pytest.mark.parametrize(
        "text,valid",
        [
            ('{"answer": "yes", "n": 2}', True),
            (' \n{"answer": "yes", "n": 2} ', True),  # whitespace around one value is JSON
            ('{"answer": "yes", "n": 2', False),  # cut mid-object
            ('{"answer": "yes", "n": "2"}', False),  # a string where the schema says integer
            ('{"answer": "yes"}', False),  # a required key missing
            ('{"answer": "yes", "n": 2},', False),  # what the simulator's broken answers end with
            ("", False),
        ],
    )
    def test_parsed_and_validated_against_the_schema(self, text, valid):
        assert json_valid(text, SCHEMA) is valid
