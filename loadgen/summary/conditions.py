"""The conditions block: everything the numbers were measured under (compare diffs it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from loadgen.summary.common import DOCS, LengthStats
from loadgen.summary.telemetry import ConditionsTelemetry


@with_config(DOCS)
class ConditionsTarget(TypedDict, total=True):
    """the server driven"""

    url: str | None
    """base URL, credentials redacted"""
    endpoint: str
    """the protocol driven, a name of backends/registry.py (OpenAI chat or completions, Triton's
    generate_stream, SGLang's native /generate, ...)"""
    model: str
    """model name requested"""
    transport: str
    """HTTP client library (httptools, aiohttp, httpx)"""
    builtin_simulator: dict[str, Any] | None
    """the simulator's config when loadgen served the run itself, else null"""
    tls: NotRequired[dict[str, Any] | None]
    """https only: verify (false = any certificate accepted, flagged in the report) and ca_bundle (the CA
    file trusted)"""


@with_config(DOCS)
class ConditionsServerMetricsLabels(TypedDict, total=False):
    """what the engine's /metrics labels and config gauges reveal of its configuration (absent when nothing
    was scraped)"""

    engine: str | None
    """engine whose metric names the server uses: vllm, sglang, trtllm, sim"""
    info: dict[str, Any]
    """labels of each *_info series, by series name (vLLM's vllm:cache_config_info: block_size,
    gpu_memory_utilization, num_gpu_blocks, ...)"""
    config: dict[str, Any]
    """configuration gauges by name (SGLang's sglang:max_total_num_tokens, TensorRT-LLM's
    trtllm_kv_cache_max_blocks, ...)"""
    labels: dict[str, Any]
    """each descriptive label's distinct values across the engine's series (model_name, engine, tp_rank, ...)
    """


@with_config(DOCS)
class ConditionsServerIdentity(TypedDict, total=False):
    """who answered, derived from /v1/models, /version and headers"""

    engine: str | None
    """engine name (vllm, sglang, tensorrt-llm, llama.cpp, loadgen-sim) from /v1/models owned_by"""
    version: Any
    """the engine version from /version, when served"""
    served_model: str | None
    """the first model /v1/models lists"""
    root: str | None
    """the model's path or hub name, when the server gives it"""
    max_model_len: int | None
    """the served model's context length"""
    server_header: str | None
    """the HTTP Server header"""
    requests_over_max_model_len: Annotated[int, Field(ge=0)]
    """requests whose prompt plus max_tokens exceed max_model_len (they will fail)"""
    slots: int
    """llama.cpp: the parallel slots its context is split over (-np); max_model_len is then one slot's
    context"""
    context_overflow: Literal["refuse", "trim", "send"]
    """target.context_overflow, when some requests did not fit max_model_len"""
    requests_trimmed: Annotated[int, Field(ge=0)]
    """requests cut to fit (context_overflow: trim)"""


@with_config(DOCS)
class ConditionsServerPreflight(TypedDict, total=True):
    """the preflight: one request in the run's exact body shape before the load"""

    sent: bool
    """whether it was sent (not to the built-in simulator, nor with target.preflight: false)"""
    ok: bool
    """the server took it"""
    error_class: str | None
    """its error class when it failed"""
    message: str | None
    """the server's own message when it failed, scrubbed"""
    dropped: list[str]
    """fields the run sends no more (ignore_eos under target.ignore_eos: auto)"""
    note: str | None
    """what the console says of it"""


@with_config(DOCS)
class ConditionsServer(TypedDict, total=False):
    """what the server said about itself: models_status, headers (engine/version ones), models (/v1/models),
    version (/version)"""

    metrics_labels: ConditionsServerMetricsLabels
    identity: ConditionsServerIdentity
    sources: list[list[str]]
    """each answer the probe kept here and the path it was heard at ([key, path]): how a saved run
    renders them"""
    props: dict[str, Any] | None
    """llama.cpp's /props: n_ctx_slot (one slot's context), total_slots, build_info, model_path"""
    preflight: ConditionsServerPreflight
    """what the preflight heard"""


@with_config(DOCS)
class ConditionsLengthsRequested(TypedDict, total=True):
    """workload.input_tokens / output_tokens as the profile gave them"""

    input_tokens: dict[str, Any] | int
    """prompt length distribution (kind: fixed, uniform, normal, lognormal, empirical, with its parameters)"""
    output_tokens: dict[str, Any] | int
    """output length distribution, as input_tokens"""


@with_config(DOCS)
class ConditionsLengthsRealised(TypedDict, total=True):
    """lengths as sampled by the workload and as the server reported them"""

    sampled: dict[str, LengthStats]
    """input_tokens and output_tokens targets actually sampled for the measured requests"""
    server_prompt_tokens: LengthStats
    """usage.prompt_tokens of ok requests"""
    server_output_tokens: LengthStats
    """usage.completion_tokens of ok requests"""
    output_tokens_short_of_requested: Annotated[int, Field(ge=0)]
    """ok requests that returned fewer tokens than requested"""


@with_config(DOCS)
class ConditionsLengths(TypedDict, total=True):
    """length distributions requested by the profile and realised in the run"""

    requested: ConditionsLengthsRequested
    realised: ConditionsLengthsRealised


@with_config(DOCS)
class ConditionsTrafficDataset(TypedDict, total=False):
    """source dataset only: workload.dataset as resolved (path, format, output_lengths, match, the length
    filters) plus entries"""

    path: str
    """the local file read (nothing is downloaded)"""
    format: str
    """auto, sharegpt or jsonl, as configured"""
    entries: Annotated[int, Field(ge=0)]
    """entries left after the length filters, the pool the seed draws prompts from"""


@with_config(DOCS)
class ConditionsTrafficTrace(TypedDict, total=False):
    """source trace only: workload.trace as resolved (path, format, time_scale, start_s, window_s) and what
    was read"""

    path: str
    """the local trace file"""
    format: str
    """the format read: mooncake, azure or native"""
    time_scale: float
    """wall seconds per trace second of the replay (workload.trace.time_scale)"""
    start_s: float
    """trace seconds skipped before the replayed window"""
    window_s: float | None
    """trace seconds replayed; null: to the end"""
    rows_read: Annotated[int, Field(ge=0)]
    """rows of the file read"""
    requests: Annotated[int, Field(ge=0)]
    """requests in the replayed slice (start_s / window_s)"""
    span_s: float | None
    """trace seconds from the window's first to its last request, before time_scale"""
    block_tokens: int | None
    """tokens per hash block (Mooncake hash_ids); null for traces without them"""
    designed_prefix_reuse: float | None
    """fraction of the trace's input tokens an unbounded prefix cache could serve, in trace order (each
    request's longest leading run of hash_ids seen before; capacity and eviction ignored); null for traces
    without hash_ids"""


@with_config(DOCS)
class ConditionsTrafficTasks(TypedDict, total=False):
    """source tasks only: the built-in task set (workload.tasks)"""

    kinds: list[str]
    """task kinds drawn in turn (arithmetic, copy, recall)"""


@with_config(DOCS)
class ConditionsTrafficPrefix(TypedDict, total=False):
    """workload.prefix, when set: requests sharing a prompt prefix (a system prompt)"""

    shared_tokens: Annotated[int, Field(ge=0)]
    """tokens of the shared prefix (counted in the input length)"""
    groups: Annotated[int, Field(ge=1)]
    """distinct prefixes"""
    fraction: Annotated[float, Field(ge=0, le=1)]
    """fraction of requests that carry one"""


@with_config(DOCS)
class ConditionsTrafficSessions(TypedDict, total=False):
    """workload.sessions, when set: multi-turn conversations"""

    turns: dict[str, Any]
    """turns per session, a length distribution (kind and its parameters)"""
    think_time_s: dict[str, Any]
    """seconds between an answer and the next turn: kind (fixed, uniform, exponential) and value / min / max
    / mean"""


@with_config(DOCS)
class ConditionsTrafficAgentic(TypedDict, total=False):
    """workload.agentic, when set: agent sessions whose next round is built from the last answer"""

    kind: str
    """workload.agentic.kind (config.agentic.AgenticKind): generated tool-call or code sessions, or a
    replayed trace (AIPerf multi_turn, an OTLP export)"""
    rounds: dict[str, Any]
    """rounds of a generated session, a length distribution (kind and its parameters)"""
    tool_time_s: dict[str, Any]
    """seconds between an answer and the next round: kind (fixed, uniform, exponential) and its
    parameters (a trace's own delays take its place)"""
    result_tokens: dict[str, Any]
    """tokens of each tool result or harness message, a length distribution"""
    messages: int
    """messages a code session's harness appends after each answer"""
    path: str | None
    """the local trace file (aiperf, otlp); null for a generated session"""
    time_scale: float
    """multiplies a trace's recorded delays"""


@with_config(DOCS)
class ConditionsTraffic(TypedDict, total=True):
    """what shaped the prompts (Workload.traffic): the source, and its figures; compare diffs these like any
    condition"""

    source: Literal["synthetic", "dataset", "trace", "tasks"]
    """synthetic prompts of the profile's lengths, a local dataset file, a replayed trace, or the built-in
    task set"""
    dataset: NotRequired[ConditionsTrafficDataset]
    trace: NotRequired[ConditionsTrafficTrace]
    tasks: NotRequired[ConditionsTrafficTasks]
    prefix: NotRequired[ConditionsTrafficPrefix]
    sessions: NotRequired[ConditionsTrafficSessions]
    agentic: NotRequired[ConditionsTrafficAgentic]


@with_config(DOCS)
class MetricDefinitions(TypedDict, total=True):
    """where the metric definitions this run used were last changed"""

    changed_in: str
    """the loadgen version whose changelog entry last changed a metric definition"""
    changelog: str
    """that entry: CHANGELOG.md and its anchor"""


@with_config(DOCS)
class ConditionsClient(TypedDict, total=True):
    """the load generator"""

    loadgen_version: str
    """loadgen version"""
    git_commit: str | None
    """commit of the loadgen checkout, '-dirty' when modified; null outside a checkout"""
    python: str
    """Python version"""
    python_implementation: str
    """CPython, PyPy, ..."""
    transport: str
    """HTTP client library"""
    event_loop: str
    """event loop module (asyncio or uvloop)"""
    libraries: dict[str, str | None]
    """versions of the libraries loadgen uses (null when not installed)"""
    workers: NotRequired[int]
    """worker processes or Ray actors that drove the load (1: the loadgen process itself)"""
    placement: NotRequired[Literal["in-process", "processes", "ray"]]
    """where the load was driven from"""
    metric_definitions: NotRequired[MetricDefinitions]
    """which CHANGELOG.md entry last changed a metric's definition: runs whose entries differ
    may not be comparable figure for figure"""


@with_config(DOCS)
class ConditionsHost(TypedDict, total=True):
    """the client machine"""

    cpus: int | None
    """CPU count"""
    cpus_usable: int | None
    """CPUs this process may run on"""
    platform: str
    """platform string"""
    machine: str
    """architecture"""


@with_config(DOCS)
class ConditionsPromptLengths(TypedDict, total=False):
    """how prompt lengths were made exact or approximated"""

    method: str
    """token ids (exact) | local tokenizer (exact) | local tokenizer, through the model's chat template
    (exact) | server /tokenize | approximate (one common word ~ one token)"""
    server_tokenize: str
    """why the server's /tokenize was not used"""
    requests_fitted: int
    """requests whose prompt was fitted with /tokenize"""
    exact: int
    """of those, how many hit their target length exactly"""
    tokenize_calls: int
    """/tokenize calls made before the run"""
    note: str
    """limits of the fitting (e.g. past the fitted requests of a duration run)"""
    server_extra_tokens: LengthStats
    """the server's prompt over the one loadgen made, request by request (usage.prompt_tokens minus the
    prompt's own count), over the measured ok requests the server gave usage for: what its chat template
    and special tokens add (0 when chat prompts were fitted through the template)"""


@with_config(DOCS)
class Conditions(TypedDict, total=True):
    """everything the numbers were measured under (docs/design.md, 'Condition metadata'); compare
    diffs these"""

    target: ConditionsTarget
    server: ConditionsServer
    profile: dict[str, Any]
    """the fully resolved profile (defaults included, secrets redacted): name, description, target, workload,
    load, sla, labels, output, sim"""
    seed: int
    """workload seed (lengths, prompts, arrivals)"""
    load: dict[str, Any]
    """the load as it ran: concurrency (arrival: closed loop) or rate and its arrival (poisson, constant,
    gamma with its burstiness; trace for a replay), max_concurrency for an open loop, warmup_requests,
    repeats, until; a run of stages or a sweep records them and no top-level level"""
    lengths: ConditionsLengths
    traffic: NotRequired[ConditionsTraffic]
    prompt_lengths_approximate: bool
    """true when prompt lengths were counted without the model's tokenizer"""
    client: ConditionsClient
    host: ConditionsHost
    labels: dict[str, str]
    """user labels (--label gpu=H200)"""
    telemetry: NotRequired[ConditionsTelemetry]
    prompt_lengths: NotRequired[ConditionsPromptLengths]
