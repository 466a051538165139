"""The HTTP server over real loopback sockets: stream formats, lengths, errors, metrics, log."""

from __future__ import annotations

import socket
import time

import httpx
import orjson
import pytest

from loadgen.sim import SimConfig, SimProcess
from loadgen.sim.text import CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_PER_REQUEST

from .helpers import ThreadedSim
from helpers import assert_within

MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"


def events(client, path: str, body: dict) -> tuple[dict, list]:
    """POST a streaming request; return headers and the decoded events ('[DONE]' kept as is)."""
    out = []
    with client.stream("POST", path, json={"stream": True, **body}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                data = line[6:]
                out.append(data if data == "[DONE]" else orjson.loads(data))
        return dict(r.headers), out


def chat(text: str = "one two three", **kw) -> dict:
    return {"messages": [{"role": "user", "content": text}], **kw}


class TestChatStream:
    def test_shape_role_tokens_usage_done(self, client):
        """Role-only chunk, one chunk per token, finish_reason on the last, usage, [DONE]."""
        headers, ev = events(
            client,
            "/v1/chat/completions",
            chat(max_tokens=5, ignore_eos=True, stream_options={"include_usage": True}),
        )
        assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        content = ev[1:6]
        assert all(e["choices"][0]["delta"]["content"].startswith(" ") for e in content)
        assert [e["choices"][0]["finish_reason"] for e in content] == [None] * 4 + ["length"]
        usage = ev[6]
        assert usage["choices"] == []
        assert usage["usage"] == {
            "prompt_tokens": 3 + CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_PER_REQUEST,
            "completion_tokens": 5,
            "total_tokens": 15,
        }
        assert ev[7] == "[DONE]" and len(ev) == 8
        ids = {e["id"] for e in ev[:7]}
        assert ids == {headers["x-request-id"]} and ids.pop().startswith("chatcmpl-sim-")
        assert {e["model"] for e in ev[:7]} == {MODEL}
        assert len({e["created"] for e in ev[:7]}) == 1

    def test_continuous_usage_on_every_chunk(self, client):
        _, ev = events(
            client,
            "/v1/chat/completions",
            chat(
                max_tokens=3,
                ignore_eos=True,
                stream_options={"include_usage": True, "continuous_usage_stats": True},
            ),
        )
        assert [e["usage"]["completion_tokens"] for e in ev[:-1]] == [0, 1, 2, 3, 3]

    def test_no_usage_chunk_unless_asked(self, client):
        _, ev = events(client, "/v1/chat/completions", chat(max_tokens=2, ignore_eos=True))
        assert len(ev) == 4 and all("usage" not in e for e in ev[:-1])


class TestCompletions:
    def test_token_id_prompt_counts_exactly(self, client):
        """A prompt of 37 token ids is 37 prompt tokens; ignore_eos gives exactly max_tokens."""
        _, ev = events(
            client,
            "/v1/completions",
            {
                "prompt": list(range(37)),
                "max_tokens": 9,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            },
        )
        assert ev[0]["object"] == "text_completion" and ev[0]["id"].startswith("cmpl-sim-")
        assert sum(1 for e in ev[:-1] if e["choices"]) == 9
        assert ev[-2]["usage"] == {"prompt_tokens": 37, "completion_tokens": 9, "total_tokens": 46}

    def test_text_prompt_counts_words(self, client):
        r = client.post("/v1/completions", json={"prompt": "a b  c\nd", "max_tokens": 2})
        assert r.json()["usage"]["prompt_tokens"] == 4

    def test_non_streaming_body(self, client):
        r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 6, "ignore_eos": True})
        body = r.json()
        assert body["choices"][0]["finish_reason"] == "length"
        assert len(body["choices"][0]["text"].split()) == 6
        assert body["usage"]["completion_tokens"] == 6
        assert r.headers["x-request-id"] == body["id"]

    def test_pseudo_eos_is_seeded_and_respects_bounds(self, client):
        """Without ignore_eos the length is drawn per prompt: same prompt, same text."""
        body = {"prompt": "tell me a story", "max_tokens": 400, "min_tokens": 3}
        a, b = (client.post("/v1/completions", json=body).json() for _ in range(2))
        assert a["choices"][0]["text"] == b["choices"][0]["text"]
        n = a["usage"]["completion_tokens"]
        assert 3 <= n <= 400
        assert a["choices"][0]["finish_reason"] == ("length" if n == 400 else "stop")


class TestErrors:
    def test_prompt_beyond_max_model_len_is_400(self, client):
        r = client.post("/v1/completions", json={"prompt": "w " * 9000, "max_tokens": 1})
        assert r.status_code == 400
        err = r.json()
        assert err["object"] == "error" and err["code"] == 400
        assert "maximum context length is 8192 tokens" in err["message"]

    def test_unknown_model_is_404(self, client):
        r = client.post("/v1/chat/completions", json=chat(model="gpt-9"))
        assert r.status_code == 404

    def test_bad_max_tokens_is_400(self, client):
        assert client.post("/v1/completions", json={"prompt": "x", "max_tokens": 0}).status_code == 400


class TestPlainEndpoints:
    def test_health_models_version(self, client):
        assert client.get("/health").status_code == 200
        card = client.get("/v1/models").json()["data"][0]
        assert (card["id"], card["owned_by"], card["max_model_len"]) == (MODEL, "loadgen-sim", 8192)
        assert client.get("/version").json()["server"] == "loadgen-sim"

    def test_metrics_names_and_counters_move(self, client):
        def scrape() -> dict[str, float]:
            text = client.get("/metrics").text
            return {
                ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1])
                for ln in text.splitlines()
                if ln and not ln.startswith("#")
            }

        label = f'{{model_name="{MODEL}"}}'
        before = scrape()
        for name in (
            "num_requests_running",
            "num_requests_waiting",
            "kv_cache_usage_perc",
            "num_preemptions_total",
            "prompt_tokens_total",
            "generation_tokens_total",
        ):
            assert f"vllm:{name}{label}" in before
        for h in (
            "time_to_first_token_seconds",
            "inter_token_latency_seconds",
            "e2e_request_latency_seconds",
            "request_queue_time_seconds",
        ):
            assert f"vllm:{h}_count{label}" in before and f"vllm:{h}_sum{label}" in before
            assert f'vllm:{h}_bucket{{model_name="{MODEL}",le="+Inf"}}' in before
        events(client, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4, "ignore_eos": True})
        after = scrape()
        assert after[f"vllm:prompt_tokens_total{label}"] - before[f"vllm:prompt_tokens_total{label}"] == 3
        assert (
            after[f"vllm:generation_tokens_total{label}"] - before[f"vllm:generation_tokens_total{label}"]
            == 4
        )
        assert after[f"vllm:time_to_first_token_seconds_count{label}"] == (
            before[f"vllm:time_to_first_token_seconds_count{label}"] + 1
        )
        assert after[f"vllm:inter_token_latency_seconds_count{label}"] == (
            before[f"vllm:inter_token_latency_seconds_count{label}"] + 3
        )


class TestGroundTruth:
    def test_one_line_per_request_with_increasing_chunk_times(self, client, sim):
        headers, ev = events(client, "/v1/chat/completions", chat(max_tokens=12, ignore_eos=True))
        rid = headers["x-request-id"]
        (rec,) = [r for r in sim.ground_truth() if r["id"] == rid]
        ns = rec["chunk_ns"]
        assert len(ns) == rec["output_tokens"] == 12 and rec["chunk_tokens"] == [1] * 12
        assert all(b > a for a, b in zip(ns, ns[1:]))
        assert rec["arrival_ns"] <= rec["admitted_ns"] <= rec["prefill_end_ns"] <= rec["first_token_ns"]
        assert rec["first_token_ns"] == ns[0] and rec["finish_ns"] >= ns[-1]
        assert rec["finish_reason"] == "length" and rec["prompt_tokens"] == 10

    def test_served_over_http(self, client, sim):
        lines = client.get("/sim/ground_truth").content.splitlines()
        assert len(lines) == len(sim.ground_truth()) > 0


class TestPacing:
    @pytest.mark.timing_absolute
    @pytest.mark.slow
    @pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
    def test_wall_gaps_follow_the_decode_step_in_real_time(self):
        """time_scale=1: a lone sequence's gaps equal the physics' B=1 step (within 1.5 ms)."""
        cfg = SimConfig(time_scale=1.0)
        sim = ThreadedSim(cfg)
        try:
            with httpx.Client(base_url=sim.url) as c:
                times = []
                with c.stream(
                    "POST",
                    "/v1/completions",
                    json={"prompt": [1] * 100, "max_tokens": 20, "ignore_eos": True, "stream": True},
                ) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            times.append(time.perf_counter_ns())
            gaps_ms = [(b - a) / 1e6 for a, b in zip(times[3:], times[4:])]
            step_ms = cfg.physics.decode_step_seconds(1, 110) * 1e3
            mean_ms = sum(gaps_ms) / len(gaps_ms)
            assert_within(abs(mean_ms - step_ms), 1.5, f"|mean gap - the physics' {step_ms:.2f} ms step|")
        finally:
            sim.close()


class TestSimProcess:
    def test_subprocess_serves_and_flushes_its_log(self, tmp_path):
        gt = tmp_path / "gt.jsonl"
        with SimProcess(SimConfig(time_scale=0.05), ground_truth_path=gt) as sim:
            assert sim.url.startswith("http://127.0.0.1:") and sim.port > 0
            r = httpx.post(
                sim.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 3, "ignore_eos": True}
            )
            assert r.json()["usage"]["completion_tokens"] == 3
        assert sim.ground_truth_path == gt
        assert orjson.loads(gt.read_bytes().splitlines()[-1])["output_tokens"] == 3

    def test_startup_failure_reports_the_childs_stderr(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            with pytest.raises(RuntimeError, match=r"(?s)stderr:.*(address|Address)"):
                SimProcess(SimConfig(), port=port, startup_timeout=10).start()
