"""Triton's generate_stream and SGLang's native /generate, end to end over loopback.

The scripted test server speaks both as the engines document them (``loadgen/testing_native.py``)
and logs when it handed each token-bearing event to the socket, on loadgen's clock; records are
matched to that log by response id. Tolerances are those of tests/loopback/test_engine.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from loadgen import records as R
from loadgen.errors import RunError
from loadgen.report.conditions import server_rows

from helpers import assert_percentiles, assert_within, run

MS = 1e6
TRITON = {"target__endpoint": "triton_generate", "target__model": "test-model"}
SGLANG = {"target__endpoint": "sglang_generate"}
PROTOCOLS = {"triton": TRITON, "sglang": SGLANG}


def script(**behaviour):
    """target.extra_body that scripts the test server (a top-level ``loadgen_test`` field)."""
    return {"target__extra_body": {"loadgen_test": behaviour}}


class TestTiming:
    @pytest.mark.timing_absolute
    @pytest.mark.slow
    @pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
    @pytest.mark.parametrize("proto", PROTOCOLS)
    def test_concurrency_1_tracks_the_server_log(self, server, make_profile, proto):
        """At c=1 token events are stamped 0-2 ms (p95; p50 under 0.5 ms) after the server sent
        them, TTFT exceeds the server's own by under 2 ms (median; 5 ms max), ITL matches. The
        excess is the request's delivery (client send to server receipt) plus the first event's
        trail; its median ran 0.6-1.05 ms here, so a 1 ms bound failed one CI run in four."""
        res = run(
            make_profile(
                server.url,
                load__concurrency=1,
                workload__num_requests=10,
                workload__output_tokens=20,
                load__warmup_requests=2,
                **PROTOCOLS[proto],
            )
        )
        log = server.log()
        measured = [r for r in res.records if not r.warmup]
        assert res.summary["counts"]["ok"] == 10
        trails, itl_err, excess = [], [], []
        for r in measured:
            gt = log[r.response_id]
            assert len(r.chunk_times_ns) == len(gt["chunk_ns"]) == 20
            trails.append((np.array(r.chunk_times_ns) - np.array(gt["chunk_ns"])) / MS)
            itl_err.append(np.diff(r.chunk_times_ns) / MS - np.diff(gt["chunk_ns"]) / MS)
            ours = (r.t_first_token_ns - r.t_send_ns) / MS
            excess.append(ours - (gt["first_token_ns"] - gt["recv_ns"]) / MS)
            assert ours >= 49.0  # the server's sleep may end a hair early; its log says when it sent
        trails, itl_err = np.concatenate(trails), np.abs(np.concatenate(itl_err))
        assert trails.min() >= 0.0 and min(excess) >= 0  # one clock: never before the server
        assert_percentiles(trails, f"{proto} c=1 chunk trail", p50=0.5, p95=2.0)
        assert_percentiles(excess, f"{proto} c=1 TTFT excess over the server's", p50=2.0, max=5.0)
        assert_percentiles(itl_err, f"{proto} c=1 |ITL error|", p50=0.5, p95=2.0)
        tpot = res.summary["metrics"]["tpot_ms"]["mean"]
        assert tpot > 9.9  # the server's 10 ms between tokens
        assert_within(tpot, 11.0, f"{proto} c=1 mean TPOT (the server's: 10 ms)")


class TestTriton:
    @pytest.mark.parametrize("transport", ("httptools", "aiohttp", "httpx"))
    def test_stream_that_just_ends_is_ok(self, server, make_profile, transport):
        """No [DONE] in this protocol: a complete response is a normal end, one token per event,
        prompt tokens from the workload's target (there is no usage block)."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=4,
                workload__output_tokens=8,
                target__transport=transport,
                **TRITON,
            )
        )
        c = res.summary["counts"]
        assert (c["sent"], c["ok"], c["failed"]) == (4, 4, 0)
        log = server.log()
        for r in res.records:
            assert r.response_id.startswith("triton-test-")
            gt = np.array(log[r.response_id]["chunk_ns"])
            assert len(r.chunk_times_ns) == len(gt) and np.all(np.array(r.chunk_times_ns) >= gt)
            assert (r.chunk_tokens, r.output_tokens, r.token_source) == ([1] * 8, 8, "chunks")
            assert (r.prompt_tokens, r.prompt_tokens_source) == (r.requested_prompt_tokens, "target")

    def test_per_event_token_counts_when_the_server_returns_them(self, server, make_profile):
        """With return_num_output_tokens each event's num_output_tokens is its token count, and
        num_input_tokens the prompt's."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                workload__output_tokens=12,
                target__extra_body={
                    "return_num_output_tokens": True,
                    "return_num_input_tokens": True,
                    "loadgen_test": {"tokens_per_chunk": [1, 3, 2]},
                },
                **TRITON,
            )
        )
        log = server.log()
        for r in res.records:
            assert r.chunk_tokens == [1, 3, 2, 1, 3, 2] == log[r.response_id]["chunk_tokens"]
            assert (r.output_tokens, r.token_source) == (12, "continuous_usage")
            assert (r.prompt_tokens, r.prompt_tokens_source) == (log[r.response_id]["prompt_tokens"], "usage")

    def test_without_counts_a_multi_token_event_counts_as_one(self, server, make_profile):
        """The documented caveat: 3 tokens per event and no count -> 4 events, 4 'tokens'."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=1,
                workload__output_tokens=12,
                **TRITON,
                **script(tokens_per_chunk=3),
            )
        )
        r = res.records[0]
        assert (r.chunk_tokens, r.output_tokens, r.token_source) == ([1, 1, 1, 1], 4, "chunks")

    def test_body_follows_the_trtllm_ensemble(self, make_profile):
        """text_input, max_tokens, stream, empty bad/stop words, min_length for ignore_eos; a
        null in extra_body removes a default field."""
        from loadgen.backends.triton import TritonBackend, TritonOptions
        from loadgen.workload import RequestSpec

        spec = RequestSpec(0, "hello there", None, 2, 5)
        body = TritonBackend(TritonOptions(model="ensemble"), transport=None).body(spec)
        assert body == {
            "text_input": "hello there",
            "max_tokens": 5,
            "stream": True,
            "bad_words": "",
            "stop_words": "",
            "min_length": 5,
        }
        opts = TritonOptions(
            model="ensemble", ignore_eos=False, extra_body={"bad_words": None, "temperature": 0}
        )
        assert TritonBackend(opts, transport=None).body(spec) == {
            "text_input": "hello there",
            "max_tokens": 5,
            "stream": True,
            "stop_words": "",
            "temperature": 0,
        }

    def test_model_is_required(self, server, make_profile):
        """Triton lists no model under an OpenAI path: without target.model the run refuses."""
        with pytest.raises(RunError, match=r"triton_generate needs target\.model"):
            run(make_profile(server.url, target__endpoint="triton_generate"))

    def test_unknown_model_fails_before_the_load(self, server, make_profile):
        """A model Triton does not serve fails the probe of /v2/models/{model}, naming it."""
        with pytest.raises(RunError, match=r"/v2/models/nope answered HTTP 400 .*no ready model 'nope'"):
            run(make_profile(server.url, target__endpoint="triton_generate", target__model="nope"))

    def test_server_identity_is_recorded(self, server, make_profile):
        """The conditions keep Triton's server and model metadata."""
        res = run(make_profile(server.url, workload__num_requests=1, **TRITON))
        s = res.summary["conditions"]["server"]
        assert s["version"]["version"] == "2.59.0-loadgen-test"
        assert s["model_metadata"]["name"] == "test-model"
        assert (s["identity"]["engine"], s["identity"]["served_model"]) == ("triton", "test-model")
        assert res.summary["conditions"]["target"]["endpoint"] == "triton_generate"
        rows = dict(server_rows(s, None))
        assert "server /v1/models" not in rows
        assert rows["server /v2/models/test-model"] == "platform=ensemble, versions=[1]"


class TestSGLang:
    @pytest.mark.parametrize("incremental", (False, True))
    def test_chunk_tokens_come_from_meta_info(self, server, make_profile, incremental):
        """Cumulative text (SGLang's default) or deltas (--incremental-streaming-output): events
        of 1, 3, 2 tokens are counted from completion_tokens, the id is meta_info.id."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                workload__output_tokens=12,
                **SGLANG,
                **script(tokens_per_chunk=[1, 3, 2], incremental=incremental),
            )
        )
        log = server.log()
        for r in res.records:
            gt = log[r.response_id]
            assert r.chunk_tokens == [1, 3, 2, 1, 3, 2] == gt["chunk_tokens"]
            assert r.chunk_times_ns[0] >= gt["chunk_ns"][0] and len(r.chunk_times_ns) == 6
            assert (r.output_tokens, r.token_source) == (12, "continuous_usage")
            assert (r.prompt_tokens, r.prompt_tokens_source) == (gt["prompt_tokens"], "usage")
        r = res.records[0]
        assert res.frame().loc[0, "tpot_ms"] == pytest.approx(
            (r.chunk_times_ns[-1] - r.t_first_token_ns) / 11 / MS
        )

    def test_tokens_whose_text_is_held_back_count_with_the_next_event(self, server, make_profile):
        """An event that advances completion_tokens but shows no new text is not a token event;
        its token is counted with the event that shows it."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                workload__output_tokens=10,
                **SGLANG,
                **script(holdback_every=3),
            )
        )
        log = server.log()
        for r in res.records:
            gt = log[r.response_id]
            assert r.chunk_tokens == gt["chunk_tokens"] == [1, 1, 2, 1, 2, 1, 2]
            assert np.all(np.array(r.chunk_times_ns) >= np.array(gt["chunk_ns"]))
            assert r.output_tokens == 10

    def test_token_id_prompts_go_as_input_ids(self, server, make_profile):
        """prompt_format token_ids sends input_ids: the server counts exactly the target length."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=3,
                workload__input_tokens=40,
                target__prompt_format="token_ids",
                **SGLANG,
            )
        )
        log = server.log()
        for r in res.records:
            assert log[r.response_id]["prompt_tokens"] == 40 == r.prompt_tokens

    def test_probe_names_the_model_from_model_info(self, server, make_profile):
        """Without target.model the run is labelled with /get_model_info's model_path."""
        res = run(make_profile(server.url, workload__num_requests=1, **SGLANG))
        cond = res.summary["conditions"]
        assert cond["target"]["model"] == "test-model"
        assert cond["server"]["model_info"]["model_path"] == "test-model"
        assert cond["server"]["version"] == {"version": "0.5.0-loadgen-test"}
        assert cond["server"]["server_info"]["incremental_streaming_output"] is False
        assert (cond["server"]["identity"]["engine"], cond["server"]["identity"]["max_model_len"]) == (
            "sglang",
            32768,
        )
        rows = dict(server_rows(cond["server"], None))
        assert rows["server /get_model_info"].startswith("model_path=test-model")


class TestFailures:
    @pytest.mark.parametrize(
        "fail,cls",
        [
            ("status:400", "http_400"),
            ("status:500", "http_500"),
            ("reset_after:3", R.READ),
            ("malformed_after:2", R.MALFORMED),
            ("garbage", R.MALFORMED),
            ("error_event_after:2", R.SERVER_ERROR_EVENT),
        ],
    )
    @pytest.mark.parametrize("proto", PROTOCOLS)
    def test_each_failure_costs_only_its_request(self, server, make_profile, proto, fail, cls):
        """HTTP errors, resets, bad events and in-stream error events are classified and counted
        (request by request: the preflight, which would stop a run on the 400, is off here)."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=3,
                target__preflight=False,
                **PROTOCOLS[proto],
                **script(fail=fail),
            )
        )
        c = res.summary["counts"]
        assert (c["sent"], c["ok"], c["failed"]) == (3, 0, 3)
        assert c["errors_by_class"] == {cls: 3}
        assert all(r.t_end_ns is not None and r.error_message for r in res.records)
        if fail.startswith("status"):
            assert all(r.error_message == f"scripted HTTP {fail[7:]}" for r in res.records)

    def test_sglang_stream_without_done_is_judged_by_its_finish(self, server, make_profile):
        """SGLang ends its stream with [DONE]; one whose last meta_info carries the finish_reason
        and then just stops delivered the whole answer: ok, its end counted; with
        target.require_done it is `no_done`."""
        res = run(make_profile(server.url, workload__num_requests=2, **SGLANG, **script(fail="no_done")))
        assert res.summary["counts"]["ok"] == 2
        assert [r.stream_end for r in res.records] == [R.NO_TERMINATOR] * 2
        assert [r.finish_reason for r in res.records] == ["length"] * 2
        strict = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                target__require_done=True,
                **SGLANG,
                **script(fail="no_done"),
            )
        )
        assert strict.summary["counts"]["errors_by_class"] == {R.NO_DONE: 2}

    @pytest.mark.parametrize("proto", PROTOCOLS)
    def test_stalled_stream_times_out(self, server, make_profile, proto):
        """The shared per-request timeout applies to the native protocols too."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                target__timeout_s=0.5,
                **PROTOCOLS[proto],
                **script(fail="stall_after:2"),
            )
        )
        assert res.summary["counts"]["errors_by_class"] == {R.TIMEOUT: 2}
        for r in res.records:
            assert 0.5 <= (r.t_end_ns - r.t_send_ns) / 1e9 < 1.5
            assert len(r.chunk_times_ns) == 2
