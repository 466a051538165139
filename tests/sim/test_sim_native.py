"""The simulator's Triton generate extension and SGLang native /generate over loopback: the events
each engine documents, the prompt counted and the words seeded exactly as the same prompt's on
/v1/completions, and bad bodies answered 400 in each protocol's shape without reaching the engine."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import orjson
import pytest

from loadgen.sim import SimConfig
from loadgen.sim.text import VOCAB_SIZE

from .helpers import ThreadedSim

PROMPT = "one two three four five"  # 5 tokens by the simulator's rule: one per word
MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"  # the default preset's served name
IN_PATH = quote(MODEL, safe="")  # as the client puts it in a Triton path


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """llama3-8b-fp16@h100 at 20x wall speed, answers ending at a pseudo-EOS after ~4 tokens."""
    path = tmp_path_factory.mktemp("native") / "ground_truth.jsonl"
    s = ThreadedSim(SimConfig(time_scale=0.05, seed=7, eos_mean_tokens=4), path)
    yield s
    s.close()


@pytest.fixture
def client(sim):
    with httpx.Client(base_url=sim.url, timeout=10) as c:
        yield c


def stream(client, path: str, body: dict) -> tuple[str, list[bytes]]:
    """(x-request-id, every ``data:`` payload) of one streamed answer."""
    with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [x[6:].encode() for x in r.iter_lines() if x.startswith("data: ")]
        return r.headers["x-request-id"], lines


def completion(client, prompt, **body) -> dict:
    """The same prompt's non-streamed answer on /v1/completions."""
    r = client.post("/v1/completions", json={"prompt": prompt, **body})
    assert r.status_code == 200
    return r.json()


def truth(sim, rid: str) -> dict:
    (line,) = (t for t in sim.ground_truth() if t["id"] == rid)
    return line


class TestTriton:
    def test_one_event_per_token_with_the_words_of_completions(self, sim, client):
        """min_length = max_tokens (ignore_eos): 6 events of one word each, no [DONE], the same
        words as /v1/completions gives the same prompt; the log names the endpoint and model."""
        body = {"text_input": PROMPT, "max_tokens": 6, "min_length": 6, "stream": True, "bad_words": ""}
        rid, events = stream(client, "/v2/models/ensemble/generate_stream", body)
        objs = [orjson.loads(e) for e in events]
        assert len(objs) == 6 and b"[DONE]" not in events
        assert {(o["model_name"], o["model_version"]) for o in objs} == {("ensemble", "1")}
        same = completion(client, PROMPT, max_tokens=6, ignore_eos=True)
        assert "".join(o["text_output"] for o in objs) == same["choices"][0]["text"]
        gt = truth(sim, rid)
        assert rid.startswith("triton-sim-")
        assert (gt["endpoint"], gt["model"], gt["stream"]) == ("triton_generate", "ensemble", True)
        assert (gt["prompt_tokens"], gt["output_tokens"], len(gt["chunk_ns"])) == (5, 6, 6)
        assert gt["prompt_tokens"] == same["usage"]["prompt_tokens"]

    def test_without_min_length_it_stops_where_completions_stops(self, client):
        """No min_length: the seeded pseudo-EOS ends the answer at the same word as on
        /v1/completions without ignore_eos (a non-streamed /generate, one JSON answer)."""
        r = client.post("/v2/models/tensorrt_llm_bls/generate", json={"text_input": PROMPT, "max_tokens": 64})
        same = completion(client, PROMPT, max_tokens=64)["choices"][0]
        assert r.status_code == 200 and same["finish_reason"] == "stop"
        assert r.json()["text_output"] == same["text"] and r.json()["model_name"] == "tensorrt_llm_bls"

    def test_token_counts_per_event_when_asked(self, client):
        """return_num_output_tokens / return_num_input_tokens: 1 per event, the prompt's 5."""
        body = {"text_input": PROMPT, "max_tokens": 3, "min_length": 3}
        body |= {"return_num_output_tokens": True, "return_num_input_tokens": True}
        _rid, events = stream(client, f"/v2/models/{IN_PATH}/generate_stream", body)
        counts = [(o["num_output_tokens"], o["num_input_tokens"]) for o in map(orjson.loads, events)]
        assert counts == [(1, 5)] * 3

    def test_metadata_and_readiness(self, client):
        """/v2, /v2/health/ready, each served model's metadata; any other name is Triton's 400."""
        assert client.get("/v2").json() == {
            "name": "loadgen-sim",
            "version": "0.1.0",
            "extensions": ["generate"],
        }
        assert client.get("/v2/health/ready").status_code == 200
        for name in ("ensemble", "tensorrt_llm_bls", MODEL):
            assert client.get(f"/v2/models/{quote(name, safe='')}").json()["name"] == name
        for r in (
            client.get("/v2/models/llama"),
            client.post("/v2/models/llama/generate_stream", json={"text_input": "x", "max_tokens": 1}),
        ):
            assert (r.status_code, r.json()) == (
                400,
                {"error": "Request for unknown model: 'llama' is not found"},
            )


class TestSGLang:
    def test_cumulative_text_and_ids_then_done(self, sim, client):
        """Every event holds the whole text and ids so far and meta_info's counts; the last has
        finish_reason length, then [DONE]; the words are /v1/completions' for the same prompt."""
        body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}, "stream": True}
        rid, events = stream(client, "/generate", body)
        assert events[-1] == b"[DONE]"
        objs = [orjson.loads(e) for e in events[:-1]]
        same = completion(client, PROMPT, max_tokens=4, ignore_eos=True)["choices"][0]["text"]
        texts = [o["text"] for o in objs]
        assert texts[-1] == same and all(texts[i + 1].startswith(texts[i]) for i in range(3))
        assert [len(o["output_ids"]) for o in objs] == [1, 2, 3, 4]
        assert objs[3]["output_ids"][:3] == objs[2]["output_ids"]
        metas = [o["meta_info"] for o in objs]
        assert [m["completion_tokens"] for m in metas] == [1, 2, 3, 4]
        assert {(m["id"], m["prompt_tokens"], m["cached_tokens"]) for m in metas} == {(rid, 5, 0)}
        assert [m["finish_reason"] for m in metas] == [None] * 3 + [{"type": "length", "length": 4}]
        gt = truth(sim, rid)
        assert (gt["endpoint"], gt["model"], gt["output_tokens"]) == ("sglang_generate", MODEL, 4)

    def test_token_ids_are_counted_and_seeded_as_completions_ids(self, client):
        """input_ids: the prompt counts its ids, and the answer (non-streamed, cut at the seeded
        EOS) is /v1/completions' for the same ids, with SGLang's stop reason (the pseudo-EOS id,
        one past the vocabulary)."""
        ids = [11, 22, 33, 44, 55, 66, 77]
        r = client.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 64}})
        same = completion(client, ids, max_tokens=64)
        out = r.json()
        assert out["text"] == same["choices"][0]["text"]
        assert out["meta_info"]["prompt_tokens"] == same["usage"]["prompt_tokens"] == 7
        n = same["usage"]["completion_tokens"]
        assert len(out["output_ids"]) == out["meta_info"]["completion_tokens"] == n < 64
        assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": VOCAB_SIZE}

    def test_max_new_tokens_defaults_to_sglangs_128(self, client):
        """Without max_new_tokens SGLang generates at most 128 tokens, and so does the simulator."""
        r = client.post("/generate", json={"text": PROMPT, "sampling_params": {"ignore_eos": True}})
        assert r.json()["meta_info"]["completion_tokens"] == 128

    def test_model_and_server_info(self, client):
        """/get_model_info names the served model; /get_server_info the config's limits."""
        assert client.get("/get_model_info").json()["model_path"] == MODEL
        info = client.get("/get_server_info").json()
        assert (info["context_length"], info["max_running_requests"], info["stream_interval"]) == (
            8192,
            256,
            1,
        )
        assert info["incremental_streaming_output"] is False


def test_incremental_mode_streams_only_the_new_word():
    """sim.incremental_streaming_output: each event carries its own word and id only."""
    s = ThreadedSim(SimConfig(time_scale=0.05, seed=7, incremental_streaming_output=True))
    try:
        with httpx.Client(base_url=s.url, timeout=10) as c:
            body = {
                "text": PROMPT,
                "sampling_params": {"max_new_tokens": 3, "ignore_eos": True},
                "stream": True,
            }
            _rid, events = stream(c, "/generate", body)
            same = completion(c, PROMPT, max_tokens=3, ignore_eos=True)["choices"][0]["text"]
            assert c.get("/get_server_info").json()["incremental_streaming_output"] is True
    finally:
        s.close()
    objs = [orjson.loads(e) for e in events[:-1]]
    assert [len(o["output_ids"]) for o in objs] == [1, 1, 1] and "".join(o["text"] for o in objs) == same
    assert [len(o["text"].split()) for o in objs] == [1, 1, 1]


BAD = [
    (
        "/v2/models/ensemble/generate_stream",
        {"max_tokens": 4},
        {"error": "input 'text_input' is missing or not a string"},
    ),
    (
        "/v2/models/ensemble/generate_stream",
        {"text_input": PROMPT},
        {"error": "input 'max_tokens' is missing"},
    ),
    (
        "/v2/models/ensemble/generate",
        {"text_input": PROMPT, "max_tokens": 0},
        {"error": "max_tokens must be an integer >= 1, got 0"},
    ),
    (
        "/generate",
        {"text": PROMPT, "input_ids": [1], "stream": True},
        {"error": {"message": "Either text or input_ids should be provided, not both or neither"}},
    ),
    (
        "/generate",
        {"text": PROMPT, "sampling_params": [1]},
        {"error": {"message": "sampling_params must be an object"}},
    ),
]


@pytest.mark.parametrize(
    "path,body,answer",
    BAD,
    ids=["no_text_input", "no_max_tokens", "max_tokens_0", "text_and_ids", "params_list"],
)
def test_a_bad_body_is_a_400_in_the_protocols_shape(sim, client, path, body, answer):
    """Triton's {"error": "..."}, SGLang's {"error": {"message"}}; nothing reaches the engine."""
    r = client.post(path, json=body)
    assert (r.status_code, r.json()) == (400, answer)
    assert r.headers["x-request-id"] not in {t["id"] for t in sim.ground_truth()}


def test_a_body_that_is_not_json_is_a_400(client):
    """Triton words it as its JSON parser does; SGLang in its error shape."""
    r = client.post("/v2/models/ensemble/generate_stream", content=b"{")
    assert r.status_code == 400 and r.json()["error"].startswith("failed to parse the request JSON buffer")
    r = client.post("/generate", content=b"{")
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("request body is not valid JSON")
