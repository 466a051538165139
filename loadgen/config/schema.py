"""The profile: one frozen, validated description of a run (target, workload, load, SLA).

Every model rejects unknown keys: a typo in a benchmark profile silently falling back to a
default produces a number measured under conditions nobody asked for. Validation happens once,
here; errors name the YAML path and what would have been valid.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from loadgen.backends import registry
from loadgen.backends.transports import TRANSPORTS
from loadgen.config.base import StrictModel, field_msg
from loadgen.config.lengths import FixedLength, LengthDist
from loadgen.config.sla import SlaConfig


# ----------------------------------------------------------------------------- sections
def _scalars_to_str(v: Any) -> Any:
    # `labels: {tp: 2}` should mean the label "2", not a type error.
    if isinstance(v, Mapping):
        return {k: str(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x
                for k, x in v.items()}
    return v


StrDict = Annotated[dict[str, str], BeforeValidator(_scalars_to_str)]
_ENV_NAME = re.compile(r"^(?:[A-Z_][A-Z0-9_]*|[a-z_][a-z0-9_]*)$")


class TargetConfig(StrictModel):
    """The server under test. ``url: null`` means loadgen starts its built-in simulator."""

    url: str | None = None
    # The wire protocol: a name in loadgen.backends.registry (chat, completions: OpenAI-compatible;
    # triton_generate: Triton's generate extension; sglang_generate: SGLang's /generate; ...).
    endpoint: str = "chat"
    model: str | None = None
    api_key_env: str | None = None
    headers: StrDict = {}
    extra_body: dict[str, Any] = {}
    ignore_eos: bool = True
    include_usage: bool = True
    continuous_usage_stats: bool = False
    prompt_format: Literal["text", "token_ids"] = "text"
    # HTTP client, a name in loadgen.backends.transports.TRANSPORTS: httptools (asyncio Protocol
    # over llhttp, the cheapest per streamed token), aiohttp, or httpx.
    transport: str = "httptools"
    timeout_s: float = Field(600.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(120.0, gt=0)

    @field_validator("endpoint")
    @classmethod
    def _registered_protocol(cls, v: str) -> str:
        return _one_of(v, registry.names())

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, v: str) -> str:
        return _one_of(v, tuple(TRANSPORTS))

    @field_validator("api_key_env")
    @classmethod
    def _env_name_not_key(cls, v: str | None) -> str | None:
        # Keys pasted here would be written verbatim into every result file; never echo them.
        if v is not None and (v.startswith("sk-") or len(v) > 64 or not _ENV_NAME.match(v)):
            raise ValueError(
                "this looks like a key, not the name of an environment variable; put the key in "
                "an environment variable (export OPENAI_API_KEY=...) and give its name here "
                "(api_key_env: OPENAI_API_KEY)")
        return v

    @model_validator(mode="after")
    def _token_ids_need_completions(self):
        backend = registry.backend(self.endpoint)
        if self.prompt_format == "token_ids" and not backend.token_ids:
            takes = " or ".join(registry.names(lambda b: b.token_ids))
            why = backend.text_only or f"the {self.endpoint} endpoint only takes text"
            raise field_msg("prompt_format", f"token_ids needs endpoint: {takes} ({why})")
        return self


def _one_of(value: str, names: tuple[str, ...]) -> str:
    if value not in names:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ValueError(f"{shown} is not one of {', '.join(names)}")
    return value


class PromptConfig(StrictModel):
    source: Literal["synthetic"] = "synthetic"
    tokenizer: str | None = None
    system_prompt_tokens: int = Field(0, ge=0)
    # Without a local tokenizer, fit text prompts to exact lengths with the server's /tokenize
    # when it offers one (vLLM does; "never" keeps the word-count approximation).
    server_tokenize: Literal["auto", "never"] = "auto"

    @field_validator("tokenizer")
    @classmethod
    def _exists(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"no such file: {v!r} (give the path to a local tokenizer.json)")
        return v


class WorkloadConfig(StrictModel):
    seed: int = 0
    num_requests: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0)
    input_tokens: LengthDist = FixedLength(value=512)
    output_tokens: LengthDist = FixedLength(value=128)
    prompt: PromptConfig = PromptConfig()

    @model_validator(mode="after")
    def _has_a_stop(self):
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("set num_requests or duration_s (or both: the run stops at "
                             "whichever comes first)")
        return self


class LoadConfig(StrictModel):
    """Closed loop (``concurrency`` slots) or open loop (``rate`` requests/s), never both."""

    concurrency: int | None = Field(None, ge=1)
    rate: float | None = Field(None, gt=0)
    arrival: Literal["poisson", "constant", "gamma"] = "poisson"
    burstiness: float = Field(1.0, gt=0)
    max_concurrency: int | None = Field(None, ge=1)
    warmup_requests: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _one_shape(self):
        how = ("closed loop: `load.concurrency: 8` or --concurrency 8; open loop: "
               "`load.rate: 4.0` (requests/s) or --rate 4")
        if self.concurrency is None and self.rate is None:
            raise ValueError(f"set exactly one of concurrency or rate ({how})")
        if self.concurrency is not None and self.rate is not None:
            raise ValueError(f"concurrency and rate are both set; set exactly one ({how})")
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise field_msg("burstiness", f"only applies to arrival: gamma (arrival is "
                             f"{self.arrival!r}); remove it or set arrival: gamma")
        return self


class ServerMetricsConfig(StrictModel):
    """Scraping the target's Prometheus metrics during the run: one GET of ``path`` every
    ``interval_s`` on a connection of its own, kept in ``server_metrics.jsonl`` and summarized
    beside the client's figures. ``enabled: true`` scrapes when the server serves metrics loadgen
    knows (vLLM, SGLang, TensorRT-LLM, the simulator) and otherwise notes why not in the summary;
    the run goes on either way."""

    enabled: bool = True
    interval_s: float = Field(1.0, ge=0.05)
    path: str = Field("/metrics", pattern=r"^/")


class OutputConfig(StrictModel):
    dir: str = "reports"
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    progress: bool = True


class Profile(StrictModel):
    name: str = "custom"
    description: str = ""
    target: TargetConfig = TargetConfig()
    # Validated from {} when absent so the error says what is missing inside the section.
    workload: WorkloadConfig = Field(default_factory=dict, validate_default=True)  # type: ignore
    load: LoadConfig = Field(default_factory=dict, validate_default=True)  # type: ignore
    sla: SlaConfig = SlaConfig()
    labels: StrDict = {}
    output: OutputConfig = OutputConfig()
    sim: dict[str, Any] = {}
    server_metrics: ServerMetricsConfig = ServerMetricsConfig()

    def resolved(self) -> dict[str, Any]:
        """Every setting, defaults included, as JSON-ready data (for result files)."""
        return self.model_dump(mode="json")


