"""The measured blocks of a run (and of each stage): counts, window, metrics, SLA, what ended it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from loadgen.summary.common import DOCS, Distribution


@with_config(DOCS)
class CountsAnomalies(TypedDict, total=False):
    """ok requests that are suspicious: zero_output_tokens counts streams that ended normally without one
    token"""

    zero_output_tokens: Annotated[int, Field(ge=0)]
    """ok measured requests whose stream ended normally without one output token"""


@with_config(DOCS)
class CountsRetryAfter(TypedDict, total=False):
    """measured requests the server answered with a Retry-After header (a 429 or 503 asking the client to
    back off)"""

    requests: Annotated[int, Field(ge=0)]
    """requests that carried Retry-After"""
    max_s: float | None
    """the longest back-off asked for, in seconds"""


@with_config(DOCS)
class CountsRetries(TypedDict, total=False):
    """measured requests sent a second time, on a fresh connection, because the reused connection they first
    went out on ended before any byte of the answer (the only retry loadgen makes; the server received
    them twice)"""

    requests: Annotated[int, Field(ge=0)]
    """requests sent twice"""
    by_reason: dict[str, int]
    """those requests by the reason on their record"""


@with_config(DOCS)
class ErrorSample(TypedDict, total=True):
    """one failed request's message for an error class: the server's own words (trimmed, secrets scrubbed)
    and, for a refusal loadgen knows, the fix"""

    message: str | None
    """the first measured request of the class: its error message (the server's, for an HTTP error)"""
    hint: str | None
    """what to change when the refusal is a known one (an extension field, a prompt past the context, an
    unknown model, an endpoint not served); null otherwise"""


@with_config(DOCS)
class CountsStreamEnds(TypedDict, total=True):
    """how the ok measured streams ended"""

    terminator: Annotated[int, Field(ge=0)]
    """with the protocol's end marker (data: [DONE], message_stop, response.completed, Triton's final flag)"""
    no_terminator: Annotated[int, Field(ge=0)]
    """after the answer's finish (and the usage asked for), the body ended without the end marker the
    protocol promises: ok, as the OpenAI SDK takes it; target.require_done fails them instead"""
    end_of_body: Annotated[int, Field(ge=0)]
    """the protocol has no end marker (Triton's generate): the response's end is the stream's"""


@with_config(DOCS)
class Counts(TypedDict, total=True):
    """request accounting over measured (non-warm-up) requests"""

    sent: Annotated[int, Field(ge=0)]
    """measured requests sent"""
    ok: Annotated[int, Field(ge=0)]
    """requests that completed successfully"""
    failed: Annotated[int, Field(ge=0)]
    """requests that failed (not ok, not cancelled)"""
    cancelled: Annotated[int, Field(ge=0)]
    """requests cancelled when the run stopped"""
    warmup: Annotated[int, Field(ge=0)]
    """warm-up requests, excluded from every statistic"""
    errors_by_class: dict[str, int]
    """non-ok requests (cancelled included) by error class: http_<status>, connect, timeout, read,
    malformed_stream, no_done, server_error_event, cancelled, client, unknown"""
    error_rate: float | None
    """failed / (ok + failed); null when there were none"""
    anomalies: NotRequired[CountsAnomalies]
    retry_after: NotRequired[CountsRetryAfter]
    retries: NotRequired[CountsRetries]
    error_samples: NotRequired[dict[str, ErrorSample]]
    """one message an error class (cancelled excluded), in the order of errors_by_class"""
    stream_ends: NotRequired[CountsStreamEnds]


@with_config(DOCS)
class Window(TypedDict, total=True):
    """the measured window: first measured send to last measured end (monotonic ns)"""

    start_ns: int | None
    """perf_counter_ns of the first measured send"""
    end_ns: int | None
    """perf_counter_ns of the last measured end"""
    seconds: float
    """window length in seconds; every rate is per second of it. A repeated run's (load.repeats): the sum of
    its repeats' windows, the gaps between them (where nothing was in flight) excluded"""


@with_config(DOCS)
class MetricsLittlesLaw(TypedDict, total=True):
    """Little's law check (L = lambda x W) on the dispatch window (first to last measured send)"""

    window_seconds: float | None
    """length of the dispatch window"""
    expected_concurrency: float | None
    """completions in the dispatch window per second times mean latency"""
    measured_concurrency: float | None
    """time-averaged in-flight count over the dispatch window"""
    ratio: float | None
    """measured / expected; far from 1 means a run too short or unsteady for its averages"""


@with_config(DOCS)
class MetricsGoodput(TypedDict, total=True):
    """requests meeting every per-request SLO (sla.slos); DistServe / vLLM --goodput definition"""

    requests_per_s: float | None
    """good requests per second of the window"""
    output_tokens_per_s: NotRequired[float | None]
    """output tokens of good requests per second of the window (absent for a pooling protocol: embeddings,
    rerank)"""
    attained_fraction: float | None
    """good / (ok + failed)"""


@with_config(DOCS)
class MetricsReasoning(TypedDict, total=True):
    """present only when some requests streamed reasoning tokens"""

    requests: int
    """measured requests that streamed reasoning"""
    ttfr_ms: Distribution
    """time to first reasoning token, ok requests"""


@with_config(DOCS)
class TimingPair(TypedDict, total=False):
    """the client's figure beside the server's own figure, over the requests that have both"""

    requests: int
    """requests paired"""
    client_mean_ms: float | None
    """the client's mean, ms"""
    server_mean_ms: float | None
    """the server's mean, ms"""
    difference_ms: float | None
    """client minus server"""
    server: str
    """the server figure paired with the client's"""


@with_config(DOCS)
class MetricsServerTimings(TypedDict, total=False):
    """llama.cpp: each response's own timings paired request by request with the client's TTFT (server
    prompt_ms) and TPOT (server predicted_ms / predicted_n); absent when no response carried them"""

    requests: Annotated[int, Field(ge=0)]
    """measured ok requests whose response carried timings"""
    ttft: TimingPair | None
    """the client's TTFT beside the server's own figure, over the requests that have both"""
    tpot: TimingPair | None
    """the client's TPOT beside the server's own figure, over the requests that have both"""


@with_config(DOCS)
class Metrics(TypedDict, total=True):
    """every latency distribution, rate and check of the run"""

    ttft_ms: NotRequired[Distribution]
    """time to first token: first token-bearing SSE event minus send, ok requests (this and every metric of a
    token stream are absent for a protocol answered whole: embeddings, rerank)"""
    ttfb_ms: NotRequired[Distribution]
    """time to first response byte minus send, ok requests"""
    itl_ms: NotRequired[Distribution]
    """inter-token latency: one sample per gap between consecutive token-bearing events, pooled over ok
    requests"""
    itl_per_token_ms: NotRequired[Distribution]
    """inter-token latency with each gap divided among the tokens its event carried (one sample per token)"""
    tpot_ms: NotRequired[Distribution]
    """time per output token: (last event - first event) / (output_tokens - 1), ok requests with >= 2 output
    tokens"""
    e2e_ms: Distribution
    """end-to-end latency: end of stream minus send, ok requests"""
    client_lag_ms: Distribution
    """send minus scheduled time, every measured request: how late the client sent"""
    ttft_from_sched_ms: NotRequired[Distribution]
    """time to first token from the scheduled send: first token-bearing SSE event minus t_sched, ok requests;
    includes the time a request waited to be sent (coordinated omission), equals ttft_ms when every
    request went out on time (absent in summaries written before it existed)"""
    e2e_from_sched_ms: NotRequired[Distribution]
    """end-to-end latency from the scheduled send: end of stream minus t_sched, ok requests; includes the
    time a request waited to be sent, equals e2e_ms when every request went out on time (absent in
    summaries written before it existed)"""
    ttft_tool_ms: NotRequired[Distribution]
    """time to the first tool-call token: the first delta.tool_calls piece (name or arguments) minus send, ok
    requests that made a tool call; present only when some did (workload.tools)"""
    request_throughput_rps: float | None
    """ok requests per second of the measured window (null for an empty window)"""
    input_tokens_per_s: float | None
    """prompt tokens of ok requests per second of the window"""
    output_tokens_per_s: NotRequired[float | None]
    """output tokens of ok requests per second of the window (absent for embeddings, rerank)"""
    total_tokens_per_s: NotRequired[float | None]
    """input plus output tokens per second of the window (absent for embeddings, rerank)"""
    items_per_s: NotRequired[float | None]
    """a pooling protocol's only (embeddings, rerank): items of ok requests (embedded inputs, reranked
    documents) per second of the window"""
    mean_concurrency: float | None
    """time-averaged number of requests in flight over the window"""
    littles_law: MetricsLittlesLaw
    goodput: MetricsGoodput
    reasoning: NotRequired[MetricsReasoning]
    token_count_source: dict[str, int]
    """ok requests by where their per-chunk token counts came from (usage, continuous_usage, tokenizer,
    chunks)"""
    prompt_tokens_source: dict[str, int]
    """ok requests by where their prompt token count came from (usage, target)"""
    server_timings: NotRequired[MetricsServerTimings]


@with_config(DOCS)
class SlaDetails(TypedDict, total=True):
    """one rule checked against this run"""

    rule: str
    """the rule as written, e.g. 'p99 ttft_ms < 700'"""
    metric: str
    """metric name"""
    stat: str | None
    """statistic (p50, p99, mean, ...) or null for a run-level number"""
    op: Literal["<", "<=", ">", ">="]
    """comparison"""
    threshold: float
    """the rule's limit"""
    value: float | None
    """the run's value; null when undefined"""
    passed: bool
    """whether the rule held"""
    reason: str | None
    """why it could not be evaluated, or (the error-rate check) how many requests failed and why; else null"""
    max_error_rate: NotRequired[bool]
    """true on the error-rate check (sla.max_error_rate) that leads every verdict's details"""


@with_config(DOCS)
class SlaBlock(TypedDict, total=True):
    """run-level SLA rules, their verdict, and the per-request SLOs behind goodput"""

    rules: list[str]
    """the rules as written"""
    verdict: Literal["pass", "fail", "none", "incomplete"]
    """pass when every rule held, none when there were no rules, incomplete when the run stopped early (the
    rules' values are still in details)"""
    details: list[SlaDetails]
    """the error-rate check first (failed / (ok + failed) <= sla.max_error_rate), then one entry per rule"""
    slos: dict[str, float]
    """per-request SLOs that were set (ttft_ms, tpot_ms, e2e_ms), in ms"""
    slo_note: NotRequired[str]
    """present when no per-request SLO was set"""
    no_verdict: NotRequired[str]
    """why the verdict is none although rules are set: no measured request (every request sent was warm-up)"""


@with_config(DOCS)
class EndedBy(TypedDict, total=True):
    """which limit ended the run, in words: a profile's num_requests can end a --duration run long before its
    time"""

    limit: Literal["num_requests", "duration_s", "until", "trace", "stages", "repeats", "stopped", "none"]
    """the limit that ended it"""
    text: str
    """what the console prints, e.g. 'workload.num_requests: 200 requests sent, in 3.9 s, before
    workload.duration_s (60 s)'"""


@with_config(DOCS)
class Measured(TypedDict, total=True):
    """the measured blocks of a run, or of one stage (analysis.metrics.summarize)"""

    counts: Counts
    window: Window
    metrics: Metrics
    sla: SlaBlock
