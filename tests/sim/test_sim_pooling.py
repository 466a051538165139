"""The simulator's pooling endpoints over loopback (``/v1/embeddings``, ``/v1/rerank``,
``/rerank``): vLLM's answer shapes, one word a token, deterministic vectors and scores, one
prefill of every token a request carries, and a loadgen run against them matched to the ground
truth."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pytest

from loadgen.sim import SimConfig, simulate
from loadgen.workload import Workload

from .helpers import ThreadedSim
from helpers import run


class TestAnswers:
    def test_embeddings_answer_one_unit_vector_per_input(self, client):
        """Three inputs of 2, 3 and 2 words: three vectors of the configured dimension, unit
        length, the same for the same text; usage counts 7 prompt tokens."""
        body = {"model": None, "input": ["one two", "three four five", "one two"]}
        r = client.post("/v1/embeddings", json=body)
        assert r.status_code == 200
        a = r.json()
        assert [d["index"] for d in a["data"]] == [0, 1, 2]
        vecs = [d["embedding"] for d in a["data"]]
        assert {len(v) for v in vecs} == {1024}
        assert all(math.isclose(sum(x * x for x in v), 1.0, abs_tol=1e-4) for v in vecs)
        assert vecs[0] == vecs[2] != vecs[1]
        assert a["usage"] == {"prompt_tokens": 7, "total_tokens": 7, "completion_tokens": 0}
        assert a["id"].startswith("embd-sim-")

    def test_a_base64_answer_holds_the_float_answer_as_float32(self, client):
        """encoding_format base64, as the client sends by default: the same vectors as the float
        answer, float32 little-endian; any other format is vLLM's 400 naming the field."""
        texts = ["one two", "three four five"]
        floats = client.post("/v1/embeddings", json={"input": texts}).json()["data"]
        b64 = client.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"}).json()
        for f, b in zip(floats, b64["data"], strict=True):
            got = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
            np.testing.assert_allclose(got, f["embedding"], rtol=0, atol=1e-7)
        assert b64["usage"]["prompt_tokens"] == 5
        r = client.post("/v1/embeddings", json={"input": texts, "encoding_format": "int8"})
        assert r.status_code == 400 and r.json()["param"] == "encoding_format"

    def test_rerank_scores_each_pair_and_counts_both(self, client):
        """A 2-word query and documents of 1 and 3 words: two results sorted by score, each
        naming its document, and (2+1) + (2+3) = 8 tokens, at both of vLLM's paths."""
        body = {"query": "red fox", "documents": ["dog", "quick brown fox"], "top_n": 2}
        for path in ("/v1/rerank", "/rerank"):
            a = client.post(path, json=body).json()
            assert sorted(x["index"] for x in a["results"]) == [0, 1]
            scores = [x["relevance_score"] for x in a["results"]]
            assert scores == sorted(scores, reverse=True) and all(0 <= s < 1 for s in scores)
            assert a["usage"]["prompt_tokens"] == 8

    @pytest.mark.parametrize(
        "path,body,param",
        [
            ("/v1/embeddings", {"input": []}, "input"),
            ("/v1/embeddings", {"input": [1, 2]}, "input"),
            ("/v1/rerank", {"documents": ["a"]}, "query"),
            ("/v1/rerank", {"query": "q", "documents": "not a list of one"}, None),
        ],
    )
    def test_a_bad_body_is_a_400(self, client, path, body, param):
        """A body of the wrong shape is vLLM's 400 with the field named (a bare string of
        documents is one document, as vLLM reads it)."""
        r = client.post(path, json=body)
        if param is None:
            assert r.status_code == 200 and len(r.json()["results"]) == 1
        else:
            assert r.status_code == 400 and r.json()["param"] == param

    def test_the_dimension_is_configurable(self):
        s = ThreadedSim(SimConfig(time_scale=0.0, embedding_dim=8))
        try:
            import httpx

            a = httpx.post(f"{s.url}/v1/embeddings", json={"input": ["x"]}).json()
            assert len(a["data"][0]["embedding"]) == 8
        finally:
            s.close()


def test_a_pooling_request_is_one_prefill():
    """On the virtual clock a request of 3 x 100 tokens with 1 output token ends in the one
    step that prefills its 300 tokens, as long as a 300-token prompt's first token."""
    cfg = SimConfig(time_scale=0.0)
    pooled, prompt = simulate(cfg, [(0, 300, 1), (10**12, 300, 1)])
    assert pooled.token_vns is not None and len(pooled.token_vns) == 1
    assert pooled.token_vns[0] == prompt.token_vns[0] - 10**12


@pytest.mark.parametrize("proto", ["embeddings", "rerank"])
def test_a_run_agrees_with_the_ground_truth(make_profile, proto):
    """A run of 8 requests of 1-5 items: each record's items and prompt tokens equal the ground
    truth's (and the workload's own count, one a word), it was sent before the server received
    it and read after the server stamped its answer; items/s = sum(items) / window; the
    fidelity block matched every answer."""
    profile = make_profile(
        None,
        target__endpoint=proto,
        workload__num_requests=8,
        workload__batch_size={"kind": "uniform", "min": 1, "max": 5},
        workload__input_tokens={"kind": "uniform", "min": 8, "max": 64},
        load__concurrency=3,
        sim__time_scale=0.2,
    )
    res = run(profile)
    assert res.summary["counts"]["ok"] == 8
    truth = {
        t["id"]: t for t in map(json.loads, (res.run_dir / "ground_truth.jsonl").read_text().splitlines())
    }
    work = Workload(profile.workload, proto)
    for r in res.records:
        gt = truth[r.response_id]
        assert (gt["endpoint"], gt["stream"], gt["output_tokens"]) == (proto, False, 0)
        assert r.items == gt["items"] == len(work.request(r.id).inputs)
        assert r.prompt_tokens == gt["prompt_tokens"] == work.request(r.id).prompt_tokens
        assert r.prompt_tokens_source == "usage"
        assert r.t_send_ns <= gt["arrival_ns"] and r.t_end_ns >= gt["finish_ns"]
        assert gt["prefill_end_ns"] <= gt["finish_ns"]
    m = res.summary["metrics"]
    assert "ttft_ms" not in m and "tpot_ms" not in m and "output_tokens_per_s" not in m
    assert m["items_per_s"] == sum(r.items for r in res.records) / res.summary["window"]["seconds"]
    excess = np.array(
        [
            (r.t_end_ns - r.t_send_ns)
            - (truth[r.response_id]["finish_ns"] - truth[r.response_id]["arrival_ns"])
            for r in res.records
        ]
    )
    assert (excess >= 0).all()
    # the fidelity block matches every answer: no first token, one whole-answer lag each, >= 0
    fid = res.summary["fidelity"]
    assert (fid["requests_matched"], fid["requests_unmatched"], fid["chunks_matched"]) == (8, 0, 8)
    assert fid["first_token_lag_ms"]["count"] == 0 and fid["chunk_lag_ms"]["min"] >= 0
    assert fid["e2e_error_ms"]["count"] == 8 and fid["e2e_error_ms"]["min"] >= 0
