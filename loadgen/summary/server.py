"""The server's own view of the run, from its /metrics scraped during it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from loadgen.summary.common import DOCS, ClientVsServer, ServerHistogram


@with_config(DOCS)
class GaugeStats(TypedDict, total=False):
    """one server gauge over the scrapes inside the measured window"""

    mean: float
    """mean of the scraped values"""
    max: float
    """largest scraped value"""
    samples: Annotated[int, Field(ge=0)]
    """scrapes that had a value"""


@with_config(DOCS)
class ServerGauges(TypedDict, total=False):
    """server gauges over the measured window"""

    running: GaugeStats | None
    """requests in the running batch; over the scrapes inside the measured window"""
    waiting: GaugeStats | None
    """requests queued in the server; over the scrapes inside the measured window"""
    kv_cache_usage: GaugeStats | None
    """fraction of the KV cache in use (0..1); over the scrapes inside the measured window"""
    spec_accept_length: GaugeStats | None
    """SGLang's mean acceptance length of its speculative steps; over the scrapes inside the window"""


@with_config(DOCS)
class ServerPrefixCache(TypedDict, total=True):
    """engines whose /metrics count prefix-cache tokens only (vLLM, the built-in simulator): prompt tokens
    looked up in the prefix cache during the run and found there (counter deltas, last scrape minus first)"""

    queries: Annotated[float, Field(ge=0)]
    """prompt tokens looked up (prefix_cache_queries_total delta)"""
    hits: Annotated[float, Field(ge=0)]
    """of those, tokens found cached (prefix_cache_hits_total delta)"""
    hit_rate: Annotated[float | None, Field(ge=0, le=1)]
    """hits / queries; null when nothing was queried"""


@with_config(DOCS)
class ServerEngineTime(TypedDict, total=False):
    """the engine's own busy time over the run (llama.cpp's prompt and generation seconds and decode calls),
    and per token: its prefill and decode cost beside the client's TTFT and TPOT; absent for engines
    without those counters"""

    prompt_s: float | None
    """seconds spent on prompts"""
    generation_s: float | None
    """seconds spent generating"""
    decode_calls: float | None
    """llama_decode() calls"""
    prompt_ms_per_token: float | None
    """prompt seconds per prompt token, ms"""
    generation_ms_per_token: float | None
    """generation seconds per generated token, ms"""


@with_config(DOCS)
class ServerView(TypedDict, total=True):
    """the server's own view of the run, scraped from its Prometheus /metrics (profile section
    server_metrics); per-scrape rows are in server_metrics.jsonl"""

    available: bool
    """false when nothing was scraped: disabled, no /metrics, or no known metric names (see note)"""
    note: NotRequired[str | None]
    """why nothing was scraped, or what the server's metrics lack"""
    engine: NotRequired[str | None]
    """engine detected from the metric names: vllm, sglang, trtllm, llamacpp, sim"""
    format: NotRequired[Literal["prometheus", "trtllm_json"] | None]
    """Prometheus text, or trtllm-serve's JSON iteration statistics"""
    path: NotRequired[str | None]
    """the path scraped"""
    interval_s: NotRequired[float | None]
    """seconds between scrapes"""
    replica: NotRequired[Annotated[int, Field(ge=0)]]
    """runs over target.urls only: the replica whose /metrics was scraped (its index: only the first
    replica's is), so every figure here, and the client's means beside them, are its requests' alone"""
    file: NotRequired[str]
    """the per-scrape file in the run folder"""
    scrapes: NotRequired[Annotated[int, Field(ge=0)]]
    """scrapes kept (the first before the load, the last after it)"""
    failed_scrapes: NotRequired[Annotated[int, Field(ge=0)]]
    """scrapes that failed during the run"""
    scrape_rtt_ms: NotRequired[dict[str, Any] | None]
    """round trip of one scrape: mean and max"""
    includes_warmup: NotRequired[bool]
    """true when warm-up requests ran: the server's deltas (and the client means beside them) include them"""
    gauges: NotRequired[ServerGauges]
    preemptions: NotRequired[float | None]
    """preemptions (SGLang: retractions) during the run"""
    tokens: NotRequired[dict[str, Any]]
    """server token counters' deltas: prompt and generation"""
    histograms: NotRequired[dict[str, ServerHistogram]]
    """server latency histograms' deltas (ttft, itl, tpot, e2e, queue_time; those the engine serves)"""
    client_vs_server: NotRequired[dict[str, ClientVsServer]]
    """client mean minus server mean (ttft, itl, itl_per_token, tpot, e2e): tells client and network lag
    apart from queueing in the server"""
    prefix_cache: NotRequired[ServerPrefixCache]
    engine_time: NotRequired[ServerEngineTime]


@with_config(DOCS)
class SpeculativeServer(TypedDict, total=False):
    """the server's speculative-decoding counters over the window (vLLM), or its acceptance-length
    gauge (SGLang)"""

    drafts: float
    """draft proposals verified (spec_decode_num_drafts delta)"""
    draft_tokens: float
    """tokens the drafts proposed"""
    accepted_tokens: float
    """of those, tokens accepted"""
    acceptance_rate: Annotated[float, Field(ge=0, le=1)]
    """accepted_tokens / draft_tokens"""
    mean_acceptance_length: Annotated[float, Field(ge=0)]
    """tokens one verification step emits: 1 + accepted_tokens / drafts (vLLM's definition), or
    SGLang's spec_accept_length gauge averaged over the window"""
    per_position: list[float]
    """per draft position, the share of drafts whose token there was accepted"""
    source: Literal["counters", "gauge"]
    """where the figures come from"""


@with_config(DOCS)
class SpeculativeStream(TypedDict, total=True):
    """the stream's view: tokens per token-bearing event of the measured ok requests whose events'
    token counts are known (a step's accepted tokens arrive in one event)"""

    events: Annotated[int, Field(ge=0)]
    """token-bearing events counted"""
    tokens: Annotated[int, Field(ge=0)]
    """tokens they carried"""
    tokens_per_event: Annotated[float, Field(ge=0)]
    """tokens / events: the client-side estimate of the mean acceptance length"""
    multi_token_events: Annotated[float, Field(ge=0, le=1)]
    """share of events that carried more than one token"""


@with_config(DOCS)
class Speculative(TypedDict, total=True):
    """speculative decoding: what the draft model buys, from the server's counters and the stream
    (server/speculative.py); shown beside TPOT"""

    server: SpeculativeServer | None
    """null when the server counts no drafts"""
    stream: SpeculativeStream | None
    """null when no event's token count is known"""
