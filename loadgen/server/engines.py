"""Each engine's names for the facts loadgen reads from its ``/metrics``, and the keys they map to.

vLLM calls the running batch ``vllm:num_requests_running``, SGLang ``sglang:num_running_reqs``,
TensorRT-LLM ``trtllm_num_requests_running``: ``ENGINES`` holds, per engine, the names of each
normalized key (``GAUGES``, ``COUNTERS``, and each of ``HISTOGRAMS``' ``_sum``/``_count``), newest
names first. Data only: ``loadgen.server.metrics`` detects the engine from them and normalizes a
scrape with them. Adding an engine (or a renamed metric) is an entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

HISTOGRAMS = ("ttft", "itl", "tpot", "e2e", "queue_time")
GAUGES = ("running", "waiting", "kv_cache_usage", "spec_accept_length")
COUNTERS = (
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    # The engine's own busy time (llama.cpp): seconds spent on prompts and on generation, and
    # its decode calls, so its per-token cost stands beside the client's TTFT and TPOT.
    "prompt_seconds_total",
    "generation_seconds_total",
    "decode_calls_total",
    # Speculative decoding (vLLM): draft proposals, the tokens they proposed and those accepted.
    "spec_drafts_total",
    "spec_draft_tokens_total",
    "spec_accepted_tokens_total",
)
# The keys of a normalized row, in order (the columns of ``server_metrics.jsonl`` after t_ns).
ROW_KEYS = GAUGES + COUNTERS + tuple(f"{h}_{p}" for h in HISTOGRAMS for p in ("sum_s", "count"))
# A row's list of accepted draft tokens by draft position, when the engine counts them.
PER_POSITION = "spec_accepted_per_position"


@dataclass(frozen=True, slots=True)
class EngineNames:
    """One engine's metric names for each normalized key; the first name present wins (newer
    names first, then the older ones the same engine used to serve)."""

    engine: str
    prefix: str
    scalars: Mapping[str, tuple[str, ...]]
    histograms: Mapping[str, tuple[str, ...]]
    # Gauges that state configuration rather than load (copied into the run's conditions).
    config_gauges: tuple[str, ...] = ()
    marker: str | None = None  # a name only this engine serves (the simulator's own metric)
    # A counter of accepted draft tokens by their position in the draft (label ``position``).
    accepted_per_position: str | None = None

    def wanted(self) -> tuple[str, ...]:
        """Every sample name a scrape must keep: the scalars and each histogram's _sum/_count."""
        out = [n for names in self.scalars.values() for n in names]
        if self.accepted_per_position:
            out.append(self.accepted_per_position)
        out += [f"{n}{s}" for names in self.histograms.values() for n in names for s in ("_sum", "_count")]
        return tuple(out)


_VLLM_SCALARS = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions_total": ("vllm:num_preemptions_total",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
    # Prompt tokens looked up in the prefix cache, and found there (vLLM v1; the gpu_ names
    # are the releases before).
    "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "spec_drafts_total": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens_total": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens_total": ("vllm:spec_decode_num_accepted_tokens_total",),
}
_VLLM_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# vLLM's old ``time_per_output_token_seconds`` was the per-token gap (renamed
# ``inter_token_latency_seconds``); its per-request TPOT is ``request_time_per_output_token``.
_VLLM_HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "tpot": ("vllm:request_time_per_output_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue_time": ("vllm:request_queue_time_seconds",),
}

ENGINES: dict[str, EngineNames] = {
    "vllm": EngineNames(
        "vllm", "vllm:", _VLLM_SCALARS, _VLLM_HISTOGRAMS, accepted_per_position=_VLLM_PER_POSITION
    ),
    # The built-in simulator serves vLLM's names, plus one of its own.
    "sim": EngineNames(
        "sim",
        "vllm:",
        _VLLM_SCALARS,
        _VLLM_HISTOGRAMS,
        marker="loadgen_sim_pacing_lag_seconds_total",
        accepted_per_position=_VLLM_PER_POSITION,
    ),
    "sglang": EngineNames(
        "sglang",
        "sglang:",
        {
            "running": ("sglang:num_running_reqs",),
            "waiting": ("sglang:num_queue_reqs",),
            "kv_cache_usage": ("sglang:token_usage",),
            "preemptions_total": ("sglang:num_retracted_requests_total",),  # SGLang "retracts"
            "prompt_tokens_total": ("sglang:prompt_tokens_total",),
            "generation_tokens_total": ("sglang:generation_tokens_total",),
            # SGLang's mean accepted length of its speculative steps (a gauge, not counters).
            "spec_accept_length": ("sglang:spec_accept_length",),
        },
        {
            "ttft": ("sglang:time_to_first_token_seconds",),
            # SGLang observes the gap per token (sum += gap, count += tokens in the step).
            "itl": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
            "e2e": ("sglang:e2e_request_latency_seconds",),
            "queue_time": ("sglang:queue_time_seconds",),
        },
        config_gauges=(
            "sglang:max_total_num_tokens",
            "sglang:max_running_requests",
            "sglang:max_prefill_tokens",
            "sglang:context_len",
        ),
    ),
    # llama.cpp's llama-server with --metrics: gauges of slots processing and requests deferred
    # (waiting for a slot), token and busy-time counters, no latency histograms; KV usage only
    # on the builds that still serve it; cached prompt tokens are prefix-cache hits.
    "llamacpp": EngineNames(
        "llamacpp",
        "llamacpp:",
        {
            "running": ("llamacpp:requests_processing",),
            "waiting": ("llamacpp:requests_deferred",),
            "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
            "prompt_tokens_total": ("llamacpp:prompt_tokens_total",),
            "generation_tokens_total": ("llamacpp:tokens_predicted_total",),
            "prefix_cache_hits_total": ("llamacpp:prompt_tokens_cached_total",),
            "prompt_seconds_total": ("llamacpp:prompt_seconds_total",),
            "generation_seconds_total": ("llamacpp:tokens_predicted_seconds_total",),
            "decode_calls_total": ("llamacpp:n_decode_total",),
        },
        {},
    ),
    # trtllm-serve's /prometheus/metrics. Its time_per_output_token is per request (TPOT).
    "trtllm": EngineNames(
        "trtllm",
        "trtllm_",
        {
            "running": ("trtllm_num_requests_running",),
            "waiting": ("trtllm_num_requests_waiting",),
            "kv_cache_usage": ("trtllm_kv_cache_utilization",),
            "prompt_tokens_total": ("trtllm_prompt_tokens_total",),
            "generation_tokens_total": ("trtllm_generation_tokens_total",),
        },
        {
            "ttft": ("trtllm_time_to_first_token_seconds",),
            "tpot": ("trtllm_time_per_output_token_seconds",),
            "e2e": ("trtllm_e2e_request_latency_seconds",),
            "queue_time": ("trtllm_request_queue_time_seconds",),
        },
        config_gauges=(
            "trtllm_kv_cache_max_blocks",
            "trtllm_kv_cache_tokens_per_block",
            "trtllm_max_batch_size_static",
            "trtllm_max_num_active_requests",
        ),
    ),
}
