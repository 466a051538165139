"""The profile: one frozen, validated description of a run (target, workload, load, SLA).

Every model rejects unknown keys: a typo in a benchmark profile silently falling back to a
default produces a number measured under conditions nobody asked for. Validation happens once,
here; errors name the YAML path and what would have been valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError

from loadgen.profile_errors import render_validation_error, yaml_error_problem
from pydantic import field_validator, model_validator

__all__ = [
    "EmpiricalLength", "FixedLength", "LengthDist", "LoadConfig", "LognormalLength",
    "NormalLength", "OutputConfig", "Profile", "ProfileError", "PromptConfig", "REQUEST_METRICS",
    "RUN_METRICS", "STATS", "ServerMetricsConfig", "SlaConfig", "SlaRule", "TargetConfig", "UniformLength",
    "WorkloadConfig", "apply_override", "load_profile", "profile_to_yaml",
]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class ProfileError(Exception):
    """An invalid profile: ``problems`` reads like ``load.arrival: 'possion' is not one of ...``."""

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"{self.source}: invalid profile" if self.source else "invalid profile"
        return head + "".join(f"\n  - {p}" for p in self.problems)


class _Model(BaseModel):
    model_config = _STRICT


def _field_msg(field: str, msg: str) -> ValueError:
    # A model-level check about one field: "@field: msg" lets the renderer put it on that path.
    return ValueError(f"@{field}: {msg}")


# ----------------------------------------------------------------------------- lengths
class FixedLength(_Model):
    kind: Literal["fixed"] = "fixed"
    value: int = Field(ge=1)


class UniformLength(_Model):
    kind: Literal["uniform"] = "uniform"
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self):
        if self.max < self.min:
            raise _field_msg("max", f"must be >= min ({self.min}), got {self.max}")
        return self


class _Clipped(_Model):
    min: int = Field(1, ge=1)
    max: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _ordered(self):
        if self.max is not None and self.max < self.min:
            raise _field_msg("max", f"must be >= min ({self.min}), got {self.max}")
        return self


class NormalLength(_Clipped):
    """Normal, clipped to [min, max]: clipping piles mass on the bounds, which is intended."""

    kind: Literal["normal"] = "normal"
    mean: float
    std: float = Field(ge=0)


class LognormalLength(_Clipped):
    """Lognormal given by its mean in tokens (not the log-space mu) and log-space sigma."""

    kind: Literal["lognormal"] = "lognormal"
    mean: float = Field(gt=0)
    sigma: float = Field(gt=0)


class EmpiricalLength(_Model):
    """Resample observed lengths with replacement, given inline or as a file (ints or JSON)."""

    kind: Literal["empirical"] = "empirical"
    values: tuple[Annotated[int, Field(ge=1)], ...] | None = None
    file: str | None = None
    _loaded: tuple[int, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _one_source(self):
        if (self.values is None) == (self.file is None):
            raise ValueError("give exactly one of values (a list of ints) or file (a path)")
        if self.values is not None and not self.values:
            raise _field_msg("values", "must not be empty")
        if self.file is not None:
            self._loaded = _read_lengths(self.file)
        return self

    @property
    def data(self) -> tuple[int, ...]:
        """The population to resample: the inline values or the file's contents."""
        return self.values if self.values is not None else self._loaded


def _read_lengths(file: str) -> tuple[int, ...]:
    try:
        text = Path(file).read_text()
    except OSError as exc:
        raise _field_msg("file", f"cannot read {file!r}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text) if text.lstrip().startswith("[") else text.split()
        values = tuple(int(v) for v in raw)
    except (ValueError, TypeError):
        raise _field_msg("file", f"{file!r}: expected one int per line or a JSON list") from None
    if not values or min(values) < 1:
        raise _field_msg("file", f"{file!r}: needs at least one value, all >= 1")
    return values


def _bare_int_is_fixed(v: Any) -> Any:
    # `input_tokens: 512` is the common case and reads better than a one-key mapping.
    if isinstance(v, int) and not isinstance(v, bool):
        return {"kind": "fixed", "value": v}
    return v


LengthDist = Annotated[
    Union[FixedLength, UniformLength, NormalLength, LognormalLength, EmpiricalLength],
    Field(discriminator="kind"),
    BeforeValidator(_bare_int_is_fixed),
]


# ----------------------------------------------------------------------------- sections
def _scalars_to_str(v: Any) -> Any:
    # `labels: {tp: 2}` should mean the label "2", not a type error.
    if isinstance(v, Mapping):
        return {k: str(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x
                for k, x in v.items()}
    return v


StrDict = Annotated[dict[str, str], BeforeValidator(_scalars_to_str)]
_ENV_NAME = re.compile(r"^(?:[A-Z_][A-Z0-9_]*|[a-z_][a-z0-9_]*)$")


class TargetConfig(_Model):
    """The server under test. ``url: null`` means loadgen starts its built-in simulator."""

    url: str | None = None
    # chat, completions: OpenAI-compatible. triton_generate: Triton's generate extension
    # (/v2/models/{model}/generate_stream, TensorRT-LLM's SSE); sglang_generate: SGLang's /generate.
    endpoint: Literal["chat", "completions", "triton_generate", "sglang_generate"] = "chat"
    model: str | None = None
    api_key_env: str | None = None
    headers: StrDict = {}
    extra_body: dict[str, Any] = {}
    ignore_eos: bool = True
    include_usage: bool = True
    continuous_usage_stats: bool = False
    prompt_format: Literal["text", "token_ids"] = "text"
    # HTTP client: httptools (asyncio Protocol over llhttp, the cheapest per streamed token),
    # aiohttp, or httpx; bench/client_overhead.py measures them against each other.
    transport: Literal["httptools", "aiohttp", "httpx"] = "httptools"
    timeout_s: float = Field(600.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(120.0, gt=0)

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
        if self.prompt_format == "token_ids" and self.endpoint not in ("completions", "sglang_generate"):
            why = {"chat": "the chat endpoint only takes text messages",
                   "triton_generate": "Triton's generate extension only takes text_input"}[self.endpoint]
            raise _field_msg("prompt_format", f"token_ids needs endpoint: completions or sglang_generate ({why})")
        return self


class PromptConfig(_Model):
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


class WorkloadConfig(_Model):
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


class LoadConfig(_Model):
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
            raise _field_msg("burstiness", f"only applies to arrival: gamma (arrival is "
                             f"{self.arrival!r}); remove it or set arrival: gamma")
        return self


REQUEST_METRICS = ("ttft_ms", "ttfb_ms", "itl_ms", "itl_per_token_ms", "tpot_ms", "e2e_ms",
                   "client_lag_ms")
RUN_METRICS = ("error_rate", "request_throughput_rps", "output_tokens_per_s", "goodput_rps")
STATS = ("p50", "p90", "p95", "p99", "p99_9", "mean", "max", "min")
_RULE = re.compile(r"^\s*(?:(?P<stat>[a-z0-9_.]+)\s+)?(?P<metric>[a-z_]+)\s*"
                   r"(?P<op><=|>=|<|>)\s*(?P<threshold>[-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*$")
RULE_GRAMMAR = ("'[stat] metric op threshold', e.g. 'p99 ttft_ms < 700' or 'error_rate < 0.01'; "
                f"stat: {', '.join(STATS)}; op: <, <=, >, >=")


class SlaRule(_Model):
    """A run-level pass/fail rule on a percentile (or a run scalar), written as one string."""

    metric: str
    stat: str | None = None
    op: Literal["<", "<=", ">", ">="]
    threshold: float

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        m = _RULE.match(v)
        if not m:
            raise ValueError(f"cannot parse rule {v!r}; grammar: {RULE_GRAMMAR}")
        d = m.groupdict()
        d["stat"] = d["stat"] and d["stat"].replace("p99.9", "p99_9")
        return d

    @model_validator(mode="after")
    def _known(self):
        if self.metric in REQUEST_METRICS:
            if self.stat not in STATS:
                raise ValueError(f"{self.metric} needs a stat, one of {', '.join(STATS)} "
                                 f"(got {self.stat!r}); grammar: {RULE_GRAMMAR}")
        elif self.metric in RUN_METRICS:
            if self.stat is not None:
                raise ValueError(f"{self.metric} is a run-level number and takes no stat "
                                 f"(write '{self.metric} {self.op} {self.threshold:g}')")
        else:
            raise ValueError(f"unknown metric {self.metric!r}; valid: "
                             f"{', '.join(REQUEST_METRICS + RUN_METRICS)}")
        return self

    def text(self) -> str:
        """The rule as written: 'p99 ttft_ms < 700'."""
        head = f"{self.stat} {self.metric}" if self.stat else self.metric
        return f"{head} {self.op} {self.threshold:g}"


class SlaConfig(_Model):
    """Per-request SLOs (for goodput) and run-level rules (for the pass/fail verdict)."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)
    rules: tuple[SlaRule, ...] = ()


class ServerMetricsConfig(_Model):
    """Scraping the target's Prometheus metrics during the run: one GET of ``path`` every
    ``interval_s`` on a connection of its own, kept in ``server_metrics.jsonl`` and summarized
    beside the client's figures. ``enabled: true`` scrapes when the server serves metrics loadgen
    knows (vLLM, SGLang, TensorRT-LLM, the simulator) and otherwise notes why not in the summary;
    the run goes on either way."""

    enabled: bool = True
    interval_s: float = Field(1.0, ge=0.05)
    path: str = Field("/metrics", pattern=r"^/")


class OutputConfig(_Model):
    dir: str = "reports"
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    progress: bool = True


class Profile(_Model):
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


# ----------------------------------------------------------------------------- loading
# Paths in a profile file are relative to that file, so a profile and its data travel together.
_PATH_KEYS = (("workload", "input_tokens", "file"), ("workload", "output_tokens", "file"),
              ("workload", "prompt", "tokenizer"))


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML keeps the last one silently)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def apply_override(data: dict, dotted: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``dotted == "a.b.c"``, creating mappings on the way."""
    parts = dotted.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ProfileError([f"{dotted}: cannot set it, {where} is {child!r}, not a mapping"])
        node = child
    node[parts[-1]] = value


def _parse_set(raw: str) -> tuple[str, Any]:
    key, eq, text = raw.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ProfileError([f"--set {raw!r}: expected key.path=value, e.g. load.rate=8"])
    if key.startswith(("labels.", "target.headers.")) or text == "":
        return key, text  # labels stay verbatim: `--set labels.tp=2` is the label "2"
    try:
        return key, yaml.safe_load(text)
    except yaml.YAMLError:
        return key, text


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProfileError([f"cannot read profile: {exc.strerror or exc}"], source=str(path))
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ProfileError([yaml_error_problem(exc)], source=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProfileError([f"the top level must be a mapping of sections (target, workload, "
                            f"load, sla, ...), got {type(data).__name__}"], source=str(path))
    for keys in _PATH_KEYS:
        node: Any = data
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(keys[-1]), str):
            node[keys[-1]] = str(path.parent / Path(node[keys[-1]]).expanduser())
    return data


def load_profile(path: str | Path | None, overrides: Mapping[str, Any] = {},
                 sets: Sequence[str] = ()) -> Profile:
    """Read a profile (None: defaults only), apply CLI overrides then ``--set`` strings, validate.

    ``overrides`` maps dotted paths to values (None clears a setting). Setting exactly one of
    ``load.rate`` / ``load.concurrency`` clears the other, so ``--rate 8`` turns a closed-loop
    profile into an open-loop one.
    """
    source = str(path) if path is not None else None
    data = _read_yaml(Path(path)) if path is not None else {}
    changes = list(overrides.items()) + [_parse_set(s) for s in sets]
    try:
        for dotted, value in changes:
            apply_override(data, dotted, value)
    except ProfileError as err:
        raise ProfileError(err.problems, source=source) from None
    chosen = {k for k, v in changes if k in ("load.rate", "load.concurrency") and v is not None}
    if len(chosen) == 1:
        other = ({"load.rate", "load.concurrency"} - chosen).pop()
        if other not in dict(changes):
            apply_override(data, other, None)
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(render_validation_error(exc, Profile), source=source) from None


def profile_to_yaml(profile: Profile) -> str:
    """The resolved profile as YAML, rules written back as strings."""
    data = profile.resolved()
    data["sla"]["rules"] = [r.text() for r in profile.sla.rules]
    return yaml.safe_dump(data, sort_keys=False)
