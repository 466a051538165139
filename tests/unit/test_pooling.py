"""Embeddings and rerank on the client side, without a server: the answer parsers on exact bytes
(over a ``FakeTransport``, whole and one byte per read), the profile's checks of what a pooling
endpoint can honour, the workload's seeded batches, and a pooling run's summary from literal
records."""

from __future__ import annotations

import asyncio
import base64
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen import metric_defs as md
from loadgen import records as R
from loadgen.analysis import bootstrap as bs
from loadgen.analysis.metrics import summarize
from loadgen.backends import registry
from loadgen.backends.stream import Live
from loadgen.config import ConfigError, TargetConfig, WorkloadConfig, load_profile
from loadgen.testing.fake_transport import FakeResponse, FakeTransport, reads, split_every
from loadgen.workload import Workload

MS = 1_000_000
TARGET = TargetConfig()  # the profile's target section at its defaults, as the adapters read it
SPEC = R.RequestSpec(0, "what is red", None, 20, 0, inputs=("a fox", "a dog", "a cat"))


def send(
    endpoint: str, body: bytes, status: int = 200, per_byte: bool = False
) -> tuple[R.RequestRecord, Any]:
    timed = reads(split_every(body, 1) if per_byte else [body])
    fake = FakeTransport(
        FakeResponse(status=status, headers={"content-type": "application/json"}, chunks=timed)
    )
    rec = R.RequestRecord(0, False, 0, 0, 0, SPEC.prompt_tokens, items=SPEC.items)
    asyncio.run(registry.backend(endpoint).for_target(TARGET, "m", fake, Live()).send(SPEC, rec))
    return rec, fake


def embeddings(n: int = 3, **usage: int) -> bytes:
    data = [{"index": i, "object": "embedding", "embedding": [0.5, -0.25]} for i in range(n)]
    return orjson.dumps({"id": "embd-1", "data": data, "usage": usage or {"prompt_tokens": 9}})


def rerank(indices=(2, 0, 1), **usage: int) -> bytes:
    results = [{"index": i, "relevance_score": 0.9 - i / 10} for i in indices]
    return orjson.dumps({"id": "rr-1", "results": results, "usage": usage or {"total_tokens": 15}})


class TestParsers:
    @pytest.mark.parametrize("per_byte", [False, True])
    def test_embeddings_body_and_answer(self, per_byte):
        """The body is the OpenAI shape; the answer's 3 vectors make an ok record with the
        server's 9 prompt tokens, no chunk, 0 output tokens, the id and the end of the last read."""
        body = embeddings()
        rec, fake = send("embeddings", body, per_byte=per_byte)
        assert fake.requests[0].path == "/v1/embeddings"
        assert fake.requests[0].json == {
            "model": "m",
            "input": ["a fox", "a dog", "a cat"],
            "encoding_format": "base64",
        }
        assert (rec.ok, rec.error_class, rec.items) == (True, None, 3)
        assert (rec.prompt_tokens, rec.prompt_tokens_source, rec.output_tokens) == (9, "usage", 0)
        assert (rec.chunk_times_ns, rec.t_first_token_ns, rec.response_id) == ([], None, "embd-1")

    def test_a_base64_answer_is_read_without_decoding(self):
        """vLLM's base64 answer (float32 bytes): ok, its dimension taken from the length; and
        a float answer, from a server that ignores encoding_format, is ok too."""
        vec = base64.b64encode(struct.pack("<3f", 0.5, -0.25, 1.0)).decode()
        data = [{"index": i, "object": "embedding", "embedding": vec} for i in range(3)]
        rec, _ = send("embeddings", orjson.dumps({"data": data, "usage": {"prompt_tokens": 9}}))
        assert (rec.ok, rec.error_class, rec.prompt_tokens) == (True, None, 9)
        rec, _ = send("embeddings", embeddings())
        assert (rec.ok, rec.error_class) == (True, None)

    @pytest.mark.parametrize(
        "vectors,message",
        [
            (["AAA="] * 3, "an embedding of 4 base64 characters is not whole float32 values"),
            (["AAAAAA=="] * 3, None),
            (["AAAAAA==", "AAAAAAAAAAA=", "AAAAAA=="], "embeddings of different dimensions [1, 2]"),
            (["AAAAAA=="] * 2 + [""], "TypeError: an embedding is str, not a list of numbers"),
        ],
    )
    def test_a_base64_answer_of_the_wrong_length_is_malformed(self, vectors, message):
        """Two bytes are half a float32; answers of 1 and 2 floats are two dimensions."""
        data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
        rec, _ = send("embeddings", orjson.dumps({"data": data}))
        if message is None:
            assert (rec.ok, rec.error_class) == (True, None)
        else:
            assert (rec.ok, rec.error_class) == (False, R.MALFORMED)
            assert message in (rec.error_message or "")

    @pytest.mark.parametrize("per_byte", [False, True])
    def test_rerank_body_and_answer(self, per_byte):
        """The body is the query, the documents and top_n = all of them; vLLM's total_tokens is
        the prompt count when no prompt_tokens is given."""
        rec, fake = send("rerank", rerank(), per_byte=per_byte)
        assert fake.requests[0].json == {
            "model": "m",
            "query": "what is red",
            "documents": ["a fox", "a dog", "a cat"],
            "top_n": 3,
        }
        assert (rec.ok, rec.prompt_tokens, rec.prompt_tokens_source, rec.items) == (True, 15, "usage", 3)

    def test_without_usage_the_workload_count_stands(self):
        rec, _ = send("embeddings", orjson.dumps({"data": orjson.loads(embeddings())["data"]}))
        assert (rec.ok, rec.prompt_tokens, rec.prompt_tokens_source) == (True, 20, "target")

    @pytest.mark.parametrize(
        "endpoint,body,cls,message",
        [
            ("embeddings", embeddings(2), R.MALFORMED, "ValueError: 2 embeddings for 3 sent"),
            ("embeddings", b'{"object": "list"}', R.MALFORMED, "KeyError: \"no 'data' in the answer\""),
            ("embeddings", embeddings()[:40], R.MALFORMED, "the answer is not JSON"),
            ("embeddings", b"[1, 2]", R.MALFORMED, "TypeError: the answer is a list, not an object"),
            (
                "embeddings",
                orjson.dumps({"data": [{"embedding": ["x"]}] * 3}),
                R.MALFORMED,
                "TypeError: an embedding of ['x']..., not numbers",
            ),
            ("rerank", rerank((0, 1)), R.MALFORMED, "ValueError: 2 results for 3 sent"),
            ("rerank", rerank((0, 1, 1)), R.MALFORMED, "ValueError: results name 2 distinct documents of 3"),
            (
                "rerank",
                rerank((0, 1, 7)),
                R.MALFORMED,
                "ValueError: a result's index 7 names no document of 3",
            ),
            ("rerank", b'{"error": {"message": "boom"}}', R.SERVER_ERROR_EVENT, "boom"),
            (
                "rerank",
                rerank(total_tokens=-1),
                R.MALFORMED,
                "TypeError: usage.total_tokens is -1, not a count",
            ),
        ],
    )
    def test_a_malformed_answer_is_its_class(self, endpoint, body, cls, message):
        """Each wrong answer costs its request with the class, and the message says what was wrong."""
        rec, _ = send(endpoint, body)
        assert (rec.ok, rec.error_class) == (False, cls)
        assert message in (rec.error_message or "")

    def test_an_error_status_is_http_class_with_its_message(self):
        rec, _ = send("embeddings", b'{"error": {"message": "overloaded"}}', status=503)
        assert (rec.ok, rec.error_class, rec.error_message, rec.http_status) == (
            False,
            "http_503",
            "overloaded",
            503,
        )

    def test_the_registry_says_which_protocols_stream(self):
        assert registry.names(lambda b: not b.streamed) == ("embeddings", "rerank")
        assert [registry.backend(n).query for n in ("embeddings", "rerank")] == [False, True]


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    return info.value.problems


class TestProfile:
    EMB = "target: {endpoint: embeddings}\nworkload: {num_requests: 4}\nload: {concurrency: 2}\n"

    def test_a_ttft_slo_on_embeddings_names_the_field_and_the_fix(self, tmp_path):
        assert problems(tmp_path, self.EMB + "sla: {ttft_ms: 200}\n") == [
            "sla.ttft_ms: names ttft_ms (TTFT), but endpoint embeddings answers whole, with no token "
            "stream, so its runs have no TTFT: bound the request latency with sla.e2e_ms"
        ]

    def test_a_tpot_rule_or_a_ttft_precision_on_rerank_is_refused(self, tmp_path):
        text = self.EMB.replace("embeddings", "rerank")
        (rule,) = problems(tmp_path, text + "sla: {rules: ['p99 tpot_ms < 30']}\n")
        assert rule.startswith("sla.rules[0]: names tpot_ms (TPOT), but endpoint rerank answers whole")
        assert rule.endswith("remove 'p99 tpot_ms < 30'")
        (until,) = problems(
            tmp_path, text.replace("concurrency: 2", "concurrency: 2, until: 'p99 ttft_ms ±5%'")
        )
        assert until.startswith("load.until: names ttft_ms") and until.endswith("name e2e_ms")

    def test_an_e2e_slo_and_rule_on_embeddings_are_accepted(self, tmp_path):
        path = tmp_path / "p.yaml"
        path.write_text(self.EMB + "sla: {e2e_ms: 200, rules: ['p99 e2e_ms < 300', 'items_per_s > 10']}\n")
        assert load_profile(path).sla.e2e_ms == 200

    def test_a_batch_size_or_items_rule_on_chat_is_refused(self, tmp_path):
        chat = self.EMB.replace("embeddings", "chat")
        (batch,) = problems(tmp_path, chat.replace("num_requests: 4", "num_requests: 4, batch_size: 8"))
        assert batch.startswith(
            "workload.batch_size: sets the items of a pooling request (embeddings, rerank)"
        )
        (items,) = problems(tmp_path, chat + "sla: {rules: ['items_per_s > 3']}\n")
        assert items.startswith("sla.rules[0]: names items_per_s, which only a pooling run has")

    @pytest.mark.parametrize(
        "workload,field",
        [
            ("batch_size: {kind: normal, mean: 8, std: 2}", "workload.batch_size"),
            ("batch_size: 5000", "workload.batch_size"),
            ("prompt: {system_prompt_tokens: 10}", "workload.prompt.system_prompt_tokens"),
            ("prefix: {groups: 2, shared_tokens: 8}", "workload.prefix"),
        ],
    )
    def test_what_a_pooling_run_cannot_take(self, tmp_path, workload, field):
        (p,) = problems(tmp_path, self.EMB.replace("num_requests: 4", f"num_requests: 4, {workload}"))
        assert p.startswith(f"{field}: ")


class TestWorkload:
    def workload(self, endpoint: str, **kw: Any) -> Workload:
        cfg = WorkloadConfig.model_validate({"num_requests": 10, "seed": 3, "input_tokens": 6, **kw})
        return Workload(cfg, endpoint)

    def test_a_fixed_batch_of_fixed_lengths(self):
        """batch_size 4 of 6 words: 4 inputs with their own openings, 24 prompt tokens, no output."""
        spec = self.workload("embeddings", batch_size=4).request(5)
        assert spec.inputs is not None and spec.items == 4 and len(set(spec.inputs)) == 4
        assert [len(t.split()) for t in spec.inputs] == [6] * 4
        assert (spec.prompt_tokens, spec.output_tokens) == (24, 0)

    def test_realised_lengths_are_the_batches(self):
        """The conditions' sampled lengths: each request's prompt tokens (its items together) and
        no output."""
        w = self.workload("embeddings", batch_size=4)
        got = w.realised(range(3))
        assert (got["input_tokens"]["mean"], got["output_tokens"]["max"]) == (24, 0)

    def test_rerank_counts_the_query_with_each_document(self):
        spec = self.workload("rerank", batch_size=3).request(0)
        assert isinstance(spec.prompt, str) and len(spec.prompt.split()) == 6
        assert spec.items == 3 and spec.prompt_tokens == 3 * (6 + 6)

    def test_batches_are_seeded_by_request(self):
        """A drawn batch size is a function of (seed, i): rebuilt alike, in any order; without
        batch_size every request has one item."""
        dist = {"kind": "uniform", "min": 1, "max": 16}
        a, b = self.workload("embeddings", batch_size=dist), self.workload("embeddings", batch_size=dist)
        forward = [a.request(i) for i in range(10)]
        assert [b.request(i) for i in reversed(range(10))][::-1] == forward
        assert len({s.items for s in forward}) > 3 and all(1 <= s.items <= 16 for s in forward)
        assert {self.workload("embeddings").request(i).items for i in range(5)} == {1}
        assert self.workload("chat").request(0).inputs is None


def test_a_pooling_summary_from_literal_records():
    """Two ok requests of 3 and 5 items over 100 ms and one failed: E2E of the ok ones, items/s
    = 8 / 0.1 s, input tokens/s of the ok ones; no metric of a token stream."""
    recs = [
        R.RequestRecord(
            0,
            False,
            0,
            0,
            0,
            30,
            ok=True,
            t_first_byte_ns=40 * MS,
            t_end_ns=40 * MS,
            prompt_tokens=30,
            output_tokens=0,
            items=3,
        ),
        R.RequestRecord(
            1,
            False,
            0,
            50 * MS,
            0,
            50,
            ok=True,
            t_first_byte_ns=99 * MS,
            t_end_ns=100 * MS,
            prompt_tokens=50,
            output_tokens=0,
            items=5,
        ),
        R.RequestRecord(2, False, 0, 10 * MS, 0, 20, error_class="http_500", t_end_ns=20 * MS, items=2),
    ]
    s = summarize(recs, streamed=False)
    m = s["metrics"]
    assert set(m) & {d.name for d in md.METRICS} == {
        d.name for d in md.applicable(False) if d.path[0] == "metrics" and len(d.path) == 2
    }
    assert (m["e2e_ms"]["count"], m["e2e_ms"]["min"], m["e2e_ms"]["max"]) == (2, 40.0, 50.0)
    assert m["items_per_s"] == pytest.approx(80.0) and m["input_tokens_per_s"] == pytest.approx(800.0)
    assert "output_tokens_per_s" not in m["goodput"] and s["counts"]["anomalies"]["zero_output_tokens"] == 0
    # the gate's bootstrap, every request drawn once, gives the summary's items/s
    assert bs.statistic(bs.RunSamples.from_run(recs, s), "items_per_s", None) == pytest.approx(80.0)


def test_a_capacity_search_of_a_pooling_endpoint_is_refused(tmp_path):
    """`loadgen capacity` stages its load, and its tables and curves are of streams: for an
    embeddings profile it stops before starting anything, saying what to do instead."""
    from loadgen.runner.capacity import CapacityError, run_capacity

    path = tmp_path / "p.yaml"
    path.write_text(TestProfile.EMB + "sla: {e2e_ms: 500}\n")
    with pytest.raises(CapacityError, match=r"endpoint embeddings answers whole.*loadgen run --rate R"):
        asyncio.run(run_capacity(load_profile(path), attainment=0.99))
