"""OpenAI's Responses API and Anthropic's Messages API, end to end over loopback: against the
scripted server (which logs when it handed each event to the socket, on loadgen's clock), the
built-in simulator (its ground truth) and the hostile server (one fault per event shape).
Records are matched to the logs by response id. Tolerances are tests/loopback/test_native_protocols.py's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen import records as R
from loadgen.errors import RunError
from loadgen.testing.hostile import HostileServer
from loadgen.testing.server import StreamServer

from helpers import assert_percentiles, assert_within, run

MS = 1e6
PROTOCOLS = ("responses", "messages")
KEY = "sk-ant-loadgen-test-8Jq2LmX0"


def script(**behaviour):
    """target.extra_body that scripts the test server (a top-level ``loadgen_test`` field)."""
    return {"target__extra_body": {"loadgen_test": behaviour}}


@pytest.fixture(scope="module")
def keyed_server():
    """The scripted server, hosted-API-shaped: /v1/messages wants this x-api-key."""
    with StreamServer(ttft_ms=50, itl_ms=10, api_key=KEY) as s:
        yield s


@pytest.mark.parametrize("proto", PROTOCOLS)
class TestAgainstTheScriptedServer:
    def test_counts_and_times_match_the_servers_log(self, keyed_server, make_profile, proto):
        """3 reasoning then 9 text deltas: 12 chunks, each stamped after the server sent it; output
        and input tokens from the stream's usage equal the server's; reasoning is the first 3
        chunks (TTFT at the first, first content at the fourth); the key went as the protocol's
        header (x-api-key for Messages, a bearer token for Responses)."""
        res = run(
            make_profile(
                keyed_server.url,
                target__endpoint=proto,
                workload__num_requests=4,
                workload__output_tokens=12,
                **script(reasoning_tokens=3),
            ),
            api_key=KEY,
        )
        assert res.summary["counts"]["ok"] == 4
        log = keyed_server.log()
        for r in res.records:
            gt = log[r.response_id]
            assert gt["endpoint"] == proto
            assert [m["role"] for m in gt["messages"]] == ["user"]  # the prompt goes as messages
            assert gt["key_header"] == ("x-api-key" if proto == "messages" else "authorization")
            assert (r.output_tokens, r.token_source) == (gt["output_tokens"], "usage") == (12, "usage")
            assert (r.prompt_tokens, r.prompt_tokens_source) == (gt["prompt_tokens"], "usage")
            assert len(r.chunk_times_ns) == len(gt["chunk_ns"]) == 12
            assert np.all(np.array(r.chunk_times_ns) >= np.array(gt["chunk_ns"]))
            assert r.reasoning_times_ns == r.chunk_times_ns[:3] and gt["reasoning_tokens"] == 3
            assert (r.t_first_token_ns, r.t_first_content_ns) == (r.chunk_times_ns[0], r.chunk_times_ns[3])
        reasoning = res.summary["metrics"]["reasoning"]
        assert reasoning["ttfr_ms"]["count"] == 4

    @pytest.mark.parametrize(
        "fail,cls",
        [
            ("error_event_after:2", R.SERVER_ERROR_EVENT),
            ("no_done", R.NO_DONE),
            ("malformed_after:1", R.MALFORMED),
            ("status:529", "http_529"),
            ("reset_after:2", R.READ),
            ("garbage", R.MALFORMED),
        ],
    )
    def test_scripted_faults_are_classed(self, keyed_server, make_profile, proto, fail, cls):
        """Each scripted fault of the protocol's shape gives a failed record of its class."""
        res = run(
            make_profile(
                keyed_server.url,
                target__endpoint=proto,
                workload__num_requests=2,
                workload__output_tokens=6,
                **script(fail=fail),
            ),
            api_key=KEY,
        )
        assert {(r.ok, r.error_class) for r in res.records} == {(False, cls)}


def test_a_failed_response_is_a_server_error_event(server, make_profile):
    """response.failed mid-stream: server_error_event, its error's message kept."""
    res = run(
        make_profile(
            server.url,
            target__endpoint="responses",
            workload__num_requests=1,
            **script(fail="failed_after:2"),
        )
    )
    (r,) = res.records
    assert (r.ok, r.error_class, r.error_message) == (
        False,
        R.SERVER_ERROR_EVENT,
        "response.failed: scripted response.failed",
    )


def test_the_overloaded_event_names_its_type(server, make_profile):
    """An Anthropic error event keeps its type (overloaded_error) in the record's message."""
    res = run(
        make_profile(
            server.url,
            target__endpoint="messages",
            workload__num_requests=1,
            **script(fail="error_event_after:1", error_type="overloaded_error"),
        )
    )
    (r,) = res.records
    assert (r.error_class, r.error_message) == (
        R.SERVER_ERROR_EVENT,
        "overloaded_error: scripted in-stream error",
    )


def test_a_wrong_key_is_refused_by_the_hosted_shaped_server(keyed_server, make_profile):
    """The scripted Messages endpoint checks x-api-key as Anthropic does: a wrong one is a 401,
    which the preflight turns into a stop before the load that names the fix, and which, with
    the preflight off, every request meets."""
    with pytest.raises(RunError, match=r"\(HTTP 401\).*set target.api_key_env"):
        run(
            make_profile(keyed_server.url, target__endpoint="messages", workload__num_requests=1),
            api_key="sk-ant-wrong-key-000",
        )
    res = run(
        make_profile(
            keyed_server.url, target__endpoint="messages", target__preflight=False, workload__num_requests=1
        ),
        api_key="sk-ant-wrong-key-000",
    )
    assert res.records[0].error_class == "http_401"


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_against_the_simulator_the_ground_truth_agrees(make_profile, proto):
    """On the embedded simulator with 4 reasoning tokens: every request matched in the
    fidelity block, output and input tokens equal the ground truth's, the reasoning subset
    is the first 4 chunks of 16."""
    res = run(
        make_profile(
            None,
            target__endpoint=proto,
            workload__num_requests=6,
            workload__output_tokens=16,
            workload__input_tokens=64,
            load__concurrency=3,
            sim__reasoning_tokens=4,
            sim__time_scale=0.2,
        )
    )
    assert res.summary["counts"]["ok"] == 6
    truth = {
        t["id"]: t for t in map(json.loads, (res.run_dir / "ground_truth.jsonl").read_text().splitlines())
    }
    assert res.summary["fidelity"]["requests_matched"] == 6
    for r in res.records:
        gt = truth[r.response_id]
        assert (gt["endpoint"], gt["reasoning_tokens"]) == (proto, 4)
        assert r.output_tokens == gt["output_tokens"] == 16 == len(r.chunk_times_ns)
        assert r.prompt_tokens == gt["prompt_tokens"]
        assert len(r.reasoning_times_ns) == 4 and r.t_first_content_ns == r.chunk_times_ns[4]
        assert np.all(np.array(r.chunk_times_ns) >= np.array(gt["chunk_ns"]))


HOSTILE = [
    ("responses_no_delta", R.MALFORMED),
    ("responses_truncated_done", R.MALFORMED),
    ("responses_error_event", R.SERVER_ERROR_EVENT),
    ("responses_failed", R.SERVER_ERROR_EVENT),
    ("messages_delta_not_text", R.MALFORMED),
    ("messages_unknown_delta", None),  # skipped, as Anthropic asks of clients
    ("messages_error_event", R.SERVER_ERROR_EVENT),
    ("messages_no_stop", None),  # its stop_reason came: whole, ok (and counted as ended unmarked)
]


@pytest.mark.parametrize("mode,cls", HOSTILE, ids=[m for m, _ in HOSTILE])
def test_each_hostile_fault_of_the_new_shapes_is_classed(make_profile, mode, cls):
    """Every fault of a Responses or Messages event shape: a classed record (or, for a delta
    type nobody documents, an ok one), never a traceback, the server itself unharmed."""
    with HostileServer(mode) as srv:
        res = run(
            make_profile(
                srv.url,
                target__endpoint=mode.split("_")[0],
                workload__num_requests=2,
                workload__output_tokens=4,
            )
        )
        assert srv.errors == []
    assert {(r.ok, r.error_class) for r in res.records} == {(cls is None, cls)}


@pytest.mark.parametrize("proto", PROTOCOLS)
@pytest.mark.parametrize("mode,cls", [("ok", None), ("reset_mid_stream", R.READ), ("one_byte_writes", None)])
def test_wire_faults_on_the_new_paths(make_profile, proto, mode, cls):
    """The hostile server's wire faults apply to the hosted paths as to chat's."""
    with HostileServer(mode) as srv:
        res = run(
            make_profile(srv.url, target__endpoint=proto, workload__num_requests=2, workload__output_tokens=4)
        )
    assert {(r.ok, r.error_class) for r in res.records} == {(cls is None, cls)}


@pytest.mark.timing_absolute
@pytest.mark.slow
@pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
@pytest.mark.parametrize("proto", PROTOCOLS)
def test_concurrency_1_tracks_the_server_log(make_profile, proto):
    """At c=1 each delta is stamped 0-2 ms (p95; p50 under 0.5 ms) after the server sent it,
    TTFT exceeds the server's own by under 2 ms (median; 5 ms max), ITL matches: the bounds
    of test_native_protocols.py's same test for Triton and SGLang."""
    with StreamServer(ttft_ms=50, itl_ms=10) as server:
        res = run(
            make_profile(
                server.url,
                target__endpoint=proto,
                load__concurrency=1,
                workload__num_requests=10,
                workload__output_tokens=20,
                load__warmup_requests=2,
            )
        )
        log = server.log()
    trails, itl_err, excess = [], [], []
    for r in (r for r in res.records if not r.warmup):
        gt = log[r.response_id]
        assert len(r.chunk_times_ns) == len(gt["chunk_ns"]) == 20
        trails.append((np.array(r.chunk_times_ns) - np.array(gt["chunk_ns"])) / MS)
        itl_err.append(np.diff(r.chunk_times_ns) / MS - np.diff(gt["chunk_ns"]) / MS)
        excess.append((r.t_first_token_ns - r.t_send_ns) / MS - (gt["first_token_ns"] - gt["recv_ns"]) / MS)
    trails, itl_err = np.concatenate(trails), np.abs(np.concatenate(itl_err))
    assert trails.min() >= 0.0 and min(excess) >= 0
    assert_percentiles(trails, f"{proto} c=1 chunk trail", p50=0.5, p95=2.0)
    assert_percentiles(excess, f"{proto} c=1 TTFT excess over the server's", p50=2.0, max=5.0)
    assert_percentiles(itl_err, f"{proto} c=1 |ITL error|", p50=0.5, p95=2.0)
    assert_within(
        res.summary["metrics"]["tpot_ms"]["mean"], 11.0, f"{proto} c=1 mean TPOT (the server's: 10 ms)"
    )


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_a_session_sends_its_history_as_messages(server, make_profile, proto):
    """Multi-turn sessions: turn 2 carries turn 1's question and the answer text the server
    really sent (reasoning excluded), as the protocol's messages."""
    res = run(
        make_profile(
            server.url,
            target__endpoint=proto,
            load__concurrency=1,
            workload__sessions={"turns": {"kind": "fixed", "value": 2}, "think_time_s": 0},
            workload__num_requests=2,
            workload__output_tokens=4,
            **script(reasoning_tokens=1),
        )
    )
    log = server.log()
    first, second = (log[r.response_id] for r in sorted(res.records, key=lambda r: r.turn))
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][:2] == [*first["messages"], {"role": "assistant", "content": first["answer"]}]
