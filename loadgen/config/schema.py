"""The profile: one frozen, validated description of a run (target, workload, load, SLA).

Every model rejects unknown keys: a typo in a benchmark profile silently falling back to a
default produces a number measured under conditions nobody asked for. Validation happens once,
here; errors name the YAML path and what would have been valid. Each section has its model
beside its kind (``target.py``, ``traffic.py``, ``client.py``, ...); this module holds the
workload and load sections and assembles the ``Profile``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from loadgen.backends import registry
from loadgen.config import agentic, pooling
from loadgen.config.agentic import AgenticConfig
from loadgen.config.base import Arrival, Int, StrDict, StrictModel, existing_file, field_msg
from loadgen.config.client import MAX_WORKERS, ClientConfig, OutputConfig, ServerMetricsConfig
from loadgen.config.lengths import FixedLength, LengthDist
from loadgen.config.media import AudioConfig, ImagesConfig
from loadgen.config.mix import ModelMixField
from loadgen.config.sla import SlaConfig
from loadgen.config.stages import MAX_STAGES, StageConfig, SweepConfig, recorded_load
from loadgen.config.target import TargetConfig
from loadgen.config.telemetry import TelemetryConfig
from loadgen.config.tools import ResponseFormatConfig, ToolsField
from loadgen.config.traffic import (
    DatasetConfig,
    PrefixConfig,
    SessionsConfig,
    TasksConfig,
    TraceConfig,
)
from loadgen.config.until import parse_until

# The client's own sections (client.py) stay importable from here, as config/__init__ does.
__all__ = [
    "MAX_DURATION_S",
    "MAX_REQUESTS",
    "MAX_WORKERS",
    "ClientConfig",
    "LoadConfig",
    "OutputConfig",
    "Profile",
    "PromptConfig",
    "ServerMetricsConfig",
    "WorkloadConfig",
]

# What one process can hold: an open-loop schedule is computed up front (8 bytes a request)
# and every record stays in memory until the summary; past this a run would not fit.
MAX_REQUESTS = 10_000_000
MAX_DURATION_S = 30 * 86_400
MAX_REPEATS = 100


def _fd_limit() -> int:
    """Connections one process may open: the hard open-file limit (the CLI raises the soft one
    to it) less a margin for the files, pipes and sockets a run needs besides."""
    try:
        import resource

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    except (ImportError, OSError, ValueError):
        return 1 << 16
    return max(1, (hard if hard != resource.RLIM_INFINITY else 1 << 20) - 64)


def _within_fd_limit(v: int | None) -> int | None:
    limit = _fd_limit()
    if v is not None and v > limit:
        raise ValueError(
            f"{v} connections exceed this process's open-file limit ({limit} usable); "
            f"raise it (ulimit -n) or spread the load over worker processes"
        )
    return v


class PromptConfig(StrictModel):
    """How prompt text is made: synthetic text, exact to the token with a local tokenizer."""

    # Where prompts come from (synthetic: deterministic text, unique from its first token).
    source: Literal["synthetic"] = "synthetic"
    # A local tokenizer.json, or a model folder holding one: exact prompt lengths.
    tokenizer: str | None = None
    # Chat prompts fitted through the chat template beside the tokenizer (chat_template.jinja, or
    # tokenizer_config.json's chat_template), so the server's prompt is the requested length;
    # "never" fits the text alone (the server's template then adds its tokens on top). Null, the
    # default, rather than "auto": a run saved before the field existed compares as the same.
    chat_template: Literal["never"] | None = None
    # Tokens of a system prompt before each prompt.
    system_prompt_tokens: Int = Field(0, ge=0, le=1 << 22)
    # Without a local tokenizer, fit text prompts to exact lengths with the server's /tokenize
    # when it offers one (vLLM does; "never" keeps the word-count approximation).
    server_tokenize: Literal["auto", "never"] = "auto"

    @field_validator("tokenizer")
    @classmethod
    def _exists(cls, v: str | None) -> str | None:
        if v is not None and Path(v).is_dir():
            if not (Path(v) / "tokenizer.json").is_file():
                raise ValueError(f"{v!r} is a folder without a tokenizer.json (give one, or its folder)")
            return v
        return existing_file(v, "the path to a local tokenizer.json, or its folder")


class WorkloadConfig(StrictModel):
    """What is sent: how many requests (or for how long), their lengths, prompts and seed."""

    # Seeds every draw (lengths, prompts, arrivals): the same seed, the same requests.
    seed: Int = Field(0, ge=0, le=2**63 - 1)
    # Measured requests to send (warm-up comes on top).
    num_requests: Int | None = Field(None, ge=1, le=MAX_REQUESTS)
    # Seconds to send for (the first of the two limits ends the run).
    duration_s: float | None = Field(None, gt=0, le=MAX_DURATION_S)
    # Prompt lengths, in tokens: an integer, or a length distribution.
    input_tokens: LengthDist = FixedLength(value=512)
    # Output lengths, in tokens (max_tokens, with ignore_eos): an integer or a length distribution.
    output_tokens: LengthDist = FixedLength(value=128)
    # How prompts are made.
    prompt: PromptConfig = PromptConfig()
    # Production-like traffic (traffic.py): at most one of dataset / trace / tasks picks the
    # prompts; prefix and sessions shape them.
    dataset: DatasetConfig | None = None
    trace: TraceConfig | None = None
    tasks: TasksConfig | None = None
    prefix: PrefixConfig | None = None
    sessions: SessionsConfig | None = None
    # A LoRA mix (mix.py): the model names requests ask for; absent, every one asks target.model.
    models: ModelMixField | None = None
    # A pooling endpoint's items a request (embeddings' inputs, rerank's documents), each of
    # input_tokens; absent: 1 (pooling.py checks it against the endpoint).
    batch_size: LengthDist | None = None
    # What an agent's requests carry (tools.py): function tools, and a JSON schema for answers.
    tools: ToolsField | None = None
    response_format: ResponseFormatConfig | None = None
    # Generated media in each chat request's user message (media.py).
    images: ImagesConfig | None = None
    audio: AudioConfig | None = None
    # Agentic rounds (agentic.py): generated tool-call or code sessions, or an agent trace replayed.
    agentic: AgenticConfig | None = None

    @model_validator(mode="after")
    def _one_source(self):
        sources = [k for k in ("dataset", "trace", "tasks") if getattr(self, k) is not None]
        if len(sources) > 1:
            raise ValueError(f"{' and '.join(sources)} are both set; one source picks the prompts")
        if self.prefix is not None and self.prefix.shared_tokens and self.prompt.system_prompt_tokens:
            raise field_msg(
                "prefix",
                "is set together with prompt.system_prompt_tokens; one shared system prompt is "
                "prefix.groups: 1 with prefix.fraction: 1, so keep only workload.prefix",
            )
        if self.trace is not None and self.prefix is not None:
            raise field_msg("prefix", "cannot shape a trace's prompts: its hash_ids say what they share")
        if self.sessions is not None and sources:
            raise field_msg(
                "sessions",
                f"build their turns from synthetic messages; remove workload.{sources[0]} or sessions",
            )
        if self.sessions is not None and self.models is not None:
            raise field_msg("models", "a mix draws a model a request; sessions are not mixed yet, remove one")
        if self.sessions is not None and (self.tools is not None or self.response_format is not None):
            raise field_msg(
                "sessions",
                "send no tools or response_format yet; an agent's conversation is tools.rounds, "
                "remove sessions",
            )
        media = [k for k in ("images", "audio") if getattr(self, k) is not None]
        if self.sessions is not None and media:
            raise field_msg(media[0], "media go in single requests; sessions carry text only, remove one")
        agentic.check_workload(self)
        return self

    @model_validator(mode="after")
    def _has_a_stop(self, info: ValidationInfo):
        # A staged run stops each stage on its own length (load.stages / load.sweep); the loader
        # says so in the validation context, since this section cannot see the load section.
        # A trace stops where it ends.
        if (info.context or {}).get("staged") or self.trace is not None:
            return self
        if self.num_requests is None and self.duration_s is None:
            raise ValueError(
                "set num_requests or duration_s (or both: the run stops at whichever comes first)"
            )
        return self


class LoadConfig(StrictModel):
    """Closed loop (``concurrency`` slots) or open loop (``rate`` requests/s), never both; or
    several load levels in turn (``stages``, or a ``sweep`` of one knob): see stages.py."""

    # Closed loop: this many users.
    concurrency: Int | None = Field(None, ge=1)
    # Open loop: requests per second.
    rate: float | None = Field(None, gt=0, le=1e6)
    # Open-loop arrival process: poisson, constant or gamma.
    arrival: Arrival = "poisson"
    # Gamma arrivals' shape: below 1 burstier than Poisson.
    burstiness: float = Field(1.0, gt=0, le=1e6)
    # Open loop: at most this many in flight.
    max_concurrency: Int | None = Field(None, ge=1)
    # Requests sent first and excluded from the figures.
    warmup_requests: Int = Field(0, ge=0, le=MAX_REQUESTS)
    # Several load levels in one run, one after the other.
    stages: tuple[StageConfig, ...] = Field((), max_length=MAX_STAGES)
    # Stages laid out from a list or range of levels.
    sweep: SweepConfig | None = None
    # Each stage also ends once this statistic is known this precisely ('p99 ttft_ms ±5%'):
    # config/until.py; its count or duration is then the limit of a stage that never gets there.
    until: str | None = None
    # The same load this many times, each a complete run in a folder of its own inside the run's
    # (runner/repeats.py): the repeats are the independent units the headline's intervals and
    # the gate's between-repeat test count. 1 is one plain run; a staged run repeats whole.
    repeats: Int = Field(1, ge=1, le=MAX_REPEATS)

    @field_validator("until")
    @classmethod
    def _until(cls, v: str | None) -> str | None:
        if v is not None:
            parse_until(v)
        return v

    @field_validator("concurrency", "max_concurrency")
    @classmethod
    def _fits_open_files(cls, v: int | None) -> int | None:
        return _within_fd_limit(v)

    @model_validator(mode="after")
    def _one_shape(self, info: ValidationInfo):
        how = (
            "closed loop: `load.concurrency: 8` or --concurrency 8; open loop: "
            "`load.rate: 4.0` (requests/s) or --rate 4"
        )
        if self.stages or self.sweep is not None:
            return self._staged()
        if (info.context or {}).get("trace"):
            if self.concurrency is not None or self.rate is not None:
                which = "concurrency" if self.concurrency is not None else "rate"
                raise field_msg(
                    which,
                    "is set together with workload.trace; a trace replays its own arrival times "
                    "(scale them with workload.trace.time_scale, --time-scale)",
                )
            return self
        if self.concurrency is None and self.rate is None:
            raise ValueError(f"set exactly one of concurrency or rate ({how})")
        if self.concurrency is not None and self.rate is not None:
            raise ValueError(f"concurrency and rate are both set; set exactly one ({how})")
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise field_msg(
                "burstiness",
                f"only applies to arrival: gamma (arrival is "
                f"{self.arrival!r}); remove it or set arrival: gamma",
            )
        return self

    def recorded(self, trace: bool = False) -> dict[str, Any]:
        """This load as it ran, for ``conditions.load`` (and the profile's load there):
        ``stages.recorded_load`` of its fields."""
        return recorded_load(self.model_dump(mode="json"), trace)

    def _staged(self):
        # A staged run repeats whole (runner/repeats.py): every repeat runs every stage, and the
        # parent pools stage i of each.
        if self.stages and self.sweep is not None:
            raise ValueError("stages and sweep are both set; give one list of load levels")
        which = "stages" if self.stages else "sweep"
        for knob in ("concurrency", "rate", "max_concurrency"):
            if getattr(self, knob) is not None:
                raise field_msg(
                    knob,
                    f"is set together with load.{which}; a staged run takes its "
                    f"load levels from load.{which} only",
                )
        if self.stages and self.warmup_requests:
            raise field_msg(
                "warmup_requests", "is set together with load.stages; give each stage its own warmup_requests"
            )
        levels = [s.concurrency for s in self.stages] + [s.max_concurrency for s in self.stages]
        if self.sweep is not None and self.sweep.concurrency is not None:
            levels += self.sweep.values()
        for level in levels:
            if level is not None:
                _within_fd_limit(int(level))
        return self


class Profile(StrictModel):
    """A whole benchmark: the target, the workload, the load, the SLA and the output, one
    validated YAML file (``loadgen run PROFILE``)."""

    # The profile's name (in the run folder's name and the report).
    name: str = Field("custom", max_length=200)
    # What the profile is for.
    description: str = Field("", max_length=10_000)
    target: TargetConfig = TargetConfig()
    # Validated from {} when absent so the error says what is missing inside the section.
    workload: WorkloadConfig = Field(default_factory=dict, validate_default=True)
    load: LoadConfig = Field(default_factory=dict, validate_default=True)
    sla: SlaConfig = SlaConfig()
    # Free key-value labels recorded in the conditions (compare and experiments read them).
    labels: StrDict = {}
    output: OutputConfig = OutputConfig()
    # The built-in simulator's settings when no URL is given (preset, time_scale, ...; see The
    # built-in simulator).
    sim: dict[str, Any] = {}
    server_metrics: ServerMetricsConfig = ServerMetricsConfig()
    # GPU telemetry (DCGM exporters, NVML) and the electricity price (see the telemetry guide).
    telemetry: TelemetryConfig = TelemetryConfig()
    client: ClientConfig = ClientConfig()

    @model_validator(mode="after")
    def _sweep_stages_have_a_length(self):
        sw, work = self.load.sweep, self.workload
        no_length = sw is not None and sw.stage_duration_s is None and sw.stage_requests is None
        if no_length and work.duration_s is None and work.num_requests is None:
            raise field_msg(
                "load",
                "sweep: set stage_duration_s or stage_requests (--stage-duration), "
                "or workload.duration_s / num_requests for every stage",
            )
        return self

    @model_validator(mode="after")
    def _traffic_fits_the_load(self):
        load, work = self.load, self.workload
        if work.trace is not None and (load.stages or load.sweep is not None):
            raise field_msg("load", "stages and sweeps set their own rates; a trace replays its own")
        rounds = (work.tools is not None and work.tools.rounds > 1) or work.agentic is not None
        if (work.sessions is not None or rounds) and (self.client.workers != 1 or self.client.ray):
            raise field_msg(
                "client",
                "multi-turn sessions and tool rounds run in one process (a conversation's turns wait "
                "on each other's answers); set client.workers: 1 (--workers 1) and no client.ray",
            )
        return self

    @model_validator(mode="after")
    def _mix_names_the_model(self):
        if self.workload.models is not None and not registry.backend(self.target.endpoint).model_mix:
            takes = ", ".join(registry.names(lambda b: b.model_mix))
            raise field_msg(
                "workload.models",
                f"endpoint {self.target.endpoint} does not name the model per request; use {takes}",
            )
        return self

    @model_validator(mode="after")
    def _fits_the_protocol(self):
        pooling.check(self)  # streamed or pooling: which metrics, batches and sources apply
        return self

    @model_validator(mode="after")
    def _endpoint_takes_tools(self):
        work = self.workload
        for key in ("tools", "response_format"):
            if getattr(work, key) is not None and not registry.backend(self.target.endpoint).tool_use:
                takes = ", ".join(registry.names(lambda b: b.tool_use))
                raise field_msg("workload", f"{key}: endpoint {self.target.endpoint} sends none; use {takes}")
        if work.agentic is not None and not registry.backend(self.target.endpoint).tool_use:
            takes = ", ".join(registry.names(lambda b: b.tool_use))
            raise field_msg(
                "workload.agentic",
                f"sends chat messages; endpoint {self.target.endpoint} takes none, use {takes}",
            )
        return self

    @model_validator(mode="after")
    def _media_has_a_shape(self):
        w = self.workload
        asked = [k for k in ("images", "audio") if getattr(w, k) is not None]
        if asked and not registry.backend(self.target.endpoint).media:
            takes = ", ".join(registry.names(lambda b: b.media))
            raise field_msg(
                f"workload.{asked[0]}",
                f"endpoint {self.target.endpoint} carries no media content parts; use {takes}",
            )
        return self

    @model_validator(mode="after")
    def _schedule_fits(self):
        load, work = self.load, self.workload
        if load.rate is not None:
            n = work.num_requests if work.num_requests is not None else load.rate * (work.duration_s or 0)
            if n + load.warmup_requests > MAX_REQUESTS:
                raise field_msg(
                    "workload",
                    f"rate {load.rate:g}/s for {work.duration_s:g} s is "
                    f"{n:,.0f} requests; one run holds at most {MAX_REQUESTS:,}: shorten "
                    f"duration_s or set num_requests",
                )
        return self

    def resolved(self) -> dict[str, Any]:
        """Every setting, defaults included, as JSON-ready data (for result files)."""
        return self.model_dump(mode="json")
