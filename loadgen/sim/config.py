"""The simulator's configuration: one frozen model, validated once on the way in.

The profile's ``sim:`` section is handed over as a plain dict; ``SimConfig.from_dict`` turns it
into a ``SimConfig`` or raises ``SimConfigError`` listing every problem as
``sim.<field>: <what is wrong>; valid: ...``. Unknown keys are errors (a typo must not silently
fall back to a default and change what is being measured).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .physics import Physics
from .presets import Preset, parse_preset, preset_help

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

Precision = Literal["fp16", "bf16", "fp8"]


class SimConfigError(ValueError):
    """A bad ``sim:`` section; the message names each field and what would be valid."""


class SimConfig(BaseModel):
    """Everything that decides what the simulated server does. Times are virtual seconds.

    ``time_scale`` is wall seconds per simulated second: 1.0 runs in real time, 2.0 in slow
    motion (everything takes twice as long on the wall clock), 0.1 ten times faster, and 0 does
    not pace at all (as fast as the CPU allows; for benchmarks of the simulator itself).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The model x GPU x precision whose sizes and peaks the engine is built from.
    preset: str = "llama3-8b-fp16@h100"
    # A fitted twin of a measured server (``loadgen sim fit`` writes it): its fields are the
    # defaults under this section's own, so `{preset_file: f.yaml, max_num_seqs: 512}` asks a
    # what-if of the fitted server. Kept here (the path) so a run's conditions say where it came from.
    preset_file: str | None = Field(None, description="a preset file (YAML of these fields) to start from")
    kv_precision: Precision | None = Field(None, description="KV-cache precision; default: the preset's")
    model_name: str | None = Field(None, description="served model name; default: the preset's model")
    max_model_len: int | None = Field(None, gt=0, description="default: the model's context length")
    time_scale: float = Field(1.0, ge=0)
    bandwidth_efficiency: float = Field(0.8, gt=0, le=1, description="achieved / peak HBM bandwidth")
    flops_efficiency: float = Field(0.5, gt=0, le=1, description="achieved / peak dense FLOP/s")
    step_overhead_ms: float = Field(1.0, ge=0, description="fixed cost per engine step")
    # What a step costs per sequence it holds beyond the GPU's math and reads: sampling,
    # detokenising, the scheduler's bookkeeping (microseconds on a GPU server, milliseconds on a
    # CPU build); what `loadgen sim fit --seq-overhead` finds on a server whose TPOT grows with
    # the batch faster than its KV reads explain.
    seq_overhead_ms: float = Field(0.0, ge=0, le=1e3, description="cost per sequence in a step")
    max_num_seqs: int = Field(256, gt=0)
    max_num_batched_tokens: int = Field(8192, gt=0, description="token budget per step")
    block_size: int = Field(16, gt=0, description="tokens per KV-cache block")
    # KV blocks as a server reports them (vLLM's num_gpu_blocks): set, it replaces the blocks
    # derived from the GPU's memory, so a fitted twin holds exactly what the real server held.
    num_gpu_blocks: int | None = Field(None, gt=0, description="KV-cache blocks; default: from memory")
    prefix_caching: bool = Field(
        True, description="reuse cached prompt blocks (vLLM v1's APC, on by default)"
    )
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    tensor_parallel_size: int = Field(1, ge=1)
    # The link a tensor-parallel group all-reduces over (physics.py): default the GPU's own,
    # NVLink on SXM boards, PCIe on cards (L4, L40S, H100 PCIe).
    interconnect: Literal["nvlink", "pcie"] | None = Field(
        None, description="tensor parallelism's link; default: the GPU's (NVLink on SXM boards)"
    )
    scheduling: Literal["prefill_first", "chunked"] = "chunked"
    # A draft model (speculative.py): k tokens proposed a step per sequence, each accepted with
    # this probability while the ones before it were, a draft pass costing draft_cost of the
    # target's decode step. 0: no speculative decoding.
    num_speculative_tokens: int = Field(0, ge=0, le=16, description="draft tokens a step (vLLM's name)")
    spec_acceptance: float = Field(0.7, ge=0, le=1, description="each draft token's chance of acceptance")
    draft_cost: float = Field(0.05, ge=0, le=1, description="a draft pass / the target's decode step")
    # How KV blocks are taken (engine.py): the whole answer's at admission and never preempted
    # (reserve: the chapter's arithmetic, TensorRT-LLM's guaranteed-no-evict), or as tokens are
    # written, preempting the newest request to recompute later when they run out (vLLM, SGLang).
    kv_allocation: Literal["reserve", "on_demand"] = Field(
        "reserve", description="reserve: prompt + answer at admission; on_demand: as written, with preemption"
    )
    seed: int = 0
    eos_mean_tokens: float = Field(256.0, ge=1, description="mean output length without ignore_eos")
    reasoning_tokens: int = Field(
        0,
        ge=0,
        description="the first N tokens of every streamed answer are reasoning (chat's "
        "reasoning_content, Responses' reasoning_text, Messages' thinking): a reasoning model",
    )

    embedding_dim: int = Field(
        1024, ge=1, le=65536, description="the dimension of /v1/embeddings' vectors (pooling endpoints)"
    )
    # An agent's requests (sim/structured.py): with tools and tool_choice auto, the share of
    # answers that call a tool (required or a named function: every one); with a
    # response_format JSON schema, the share of answers broken on purpose (invalid JSON).
    tool_call_rate: float = Field(
        1.0, ge=0, le=1, description="share of tool_choice auto answers that call a tool"
    )
    json_invalid_rate: float = Field(
        0.0, ge=0, le=1, description="share of structured (json_schema) answers streamed as invalid JSON"
    )
    incremental_streaming_output: bool = Field(
        False,
        description="SGLang's native /generate streams only each step's new text and ids "
        "(SGLang's --incremental-streaming-output); default: the whole output so far, as SGLang",
    )

    # LoRA adapters served beside the base model (vLLM's --lora-modules / --max-loras): a step
    # that admits a request for an adapter not resident loads it first, evicting the least
    # recently used when max_loras are resident, and the load costs lora_load_ms of that step.
    lora_adapters: tuple[str, ...] = Field((), description="adapter names served beside the base model")
    max_loras: int = Field(1, ge=1, description="adapters resident at once (vLLM's --max-loras)")
    lora_load_ms: float = Field(0.0, ge=0, le=3.6e6, description="cost of loading a non-resident adapter")

    # Media in chat prompts (media.py): an image's tokens by Qwen2-VL's resize rule and its
    # defaults (4 to 16384 tokens an image), audio's at Qwen2-Audio's 25 tokens a second; URLs
    # are never fetched, so they count as an image of url_image_size or a clip of url_audio_s.
    image_patch_size: int = Field(14, ge=1, le=1024, description="ViT patch side, pixels")
    image_merge_size: int = Field(2, ge=1, le=64, description="patches merged per token, per side")
    image_min_pixels: int = Field(56 * 56, ge=1, description="an image is scaled up to at least this")
    image_max_pixels: int = Field(28 * 28 * 16384, ge=1, description="and down to at most this")
    audio_tokens_per_s: float = Field(25.0, gt=0, le=10_000, description="audio tokens a second")
    url_image_size: tuple[int, int] = Field((512, 512), description="(width, height) of an image URL")
    url_audio_s: float = Field(10.0, gt=0, le=3600, description="seconds of an audio URL")

    @model_validator(mode="before")
    @classmethod
    def _read_preset_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("preset_file") is None:
            return data
        return {**read_preset_file(data["preset_file"]), **data}

    @field_validator("lora_adapters")
    @classmethod
    def _unique_adapters(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        dup = sorted({n for n in v if v.count(n) > 1 or not n})
        if dup:
            raise ValueError(f"adapter names must be unique and non-empty; repeated or empty: {dup}")
        return v

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str) -> str:
        parse_preset(v)
        return v.strip().lower()

    @model_validator(mode="after")
    def _fits(self) -> SimConfig:
        gpu = self.parsed.gpu
        if self.interconnect == "nvlink" and gpu.nvlink_bandwidth is None:
            raise ValueError(f"interconnect: the {gpu.name} has no NVLink; valid: pcie")
        p = self.physics
        cap = self.kv_capacity_bytes
        if cap <= 0 and self.num_gpu_blocks is None:
            raise ValueError(
                f"preset: weights ({p.weight_bytes / 1e9:.1f} GB) do not fit in "
                f"{p.memory_bytes / 1e9:.0f} GB x gpu_memory_utilization {self.gpu_memory_utilization}"
                "; valid: fp8 weights, a bigger GPU, or tensor_parallel_size > 1"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens: {self.max_num_batched_tokens} cannot decode a full batch "
                f"of max_num_seqs={self.max_num_seqs}; valid: >= max_num_seqs"
            )
        if self.max_model_len is not None and self.max_model_len > self.parsed.model.max_context:
            raise ValueError(
                f"max_model_len: {self.max_model_len} exceeds the model's context length; "
                f"valid: 1..{self.parsed.model.max_context}"
            )
        if self.served_model_name in self.lora_adapters:
            raise ValueError(f"lora_adapters: {self.served_model_name!r} is the base model's name")
        if self.num_blocks * self.block_size < self.context_len:
            raise ValueError(
                f"max_model_len: one {self.context_len}-token sequence needs more KV cache than "
                f"the {cap / 1e9:.1f} GB left after weights; valid: a smaller max_model_len"
            )
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SimConfig:
        """Validate a profile's ``sim:`` section (None or {} gives the defaults)."""
        try:
            return cls.model_validate(d or {})
        except ValidationError as e:
            raise SimConfigError("; ".join(_describe(err) for err in e.errors())) from None

    # Derived values (not fields: cached on first use, excluded from dumps).
    @cached_property
    def parsed(self) -> Preset:
        return parse_preset(self.preset)

    @cached_property
    def physics(self) -> Physics:
        pr = self.parsed
        return Physics.from_specs(
            pr.model,
            pr.gpu,
            precision=pr.precision,
            kv_precision=self.kv_precision or pr.kv_precision,
            bandwidth_efficiency=self.bandwidth_efficiency,
            flops_efficiency=self.flops_efficiency,
            step_overhead_ms=self.step_overhead_ms,
            tensor_parallel_size=self.tensor_parallel_size,
            interconnect=self.interconnect,
            seq_overhead_ms=self.seq_overhead_ms,
        )

    @property
    def served_model_name(self) -> str:
        return self.model_name or self.parsed.model.hf_name

    @property
    def context_len(self) -> int:
        return self.max_model_len or self.parsed.model.max_context

    @property
    def kv_capacity_bytes(self) -> float:
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks * self.block_size * self.physics.kv_bytes_per_token
        return self.physics.kv_capacity_bytes(self.gpu_memory_utilization)

    @property
    def num_blocks(self) -> int:
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        return max(0, int(self.kv_capacity_bytes // (self.block_size * self.physics.kv_bytes_per_token)))

    def describe(self) -> dict[str, Any]:
        """The config plus what it implies, for /sim/info and run metadata."""
        p = self.physics
        return {
            "config": self.model_dump(),
            "model": self.served_model_name,
            "gpu": self.parsed.gpu.name,
            "weight_gb": round(p.weight_bytes / 1e9, 3),
            "kv_bytes_per_token": p.kv_bytes_per_token,
            "kv_capacity_gb": round(self.kv_capacity_bytes / 1e9, 3),
            "kv_blocks": self.num_blocks,
            "max_model_len": self.context_len,
            "decode_step_ms_b1": round(p.decode_step_seconds(1, 0) * 1e3, 4),
            "knee_batch": round(p.knee_batch(), 1),
        }


# What a preset file may hold besides SimConfig's fields: the fit's provenance and residuals,
# read by people (and the run's conditions), not by the engine.
PRESET_FILE_INFO = "fit"


def read_preset_file(path: str | Path) -> dict[str, Any]:
    """A preset file's SimConfig fields (its ``fit:`` block left out); ValueError says why a
    file cannot be used (missing, not YAML, not a mapping, or naming another preset file)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"preset_file: cannot read {str(path)!r} ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"preset_file: {str(path)!r} is not YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"preset_file: {str(path)!r} holds no mapping of simulator fields")
    fields = {k: v for k, v in data.items() if k != PRESET_FILE_INFO}
    if "preset_file" in fields:
        raise ValueError(f"preset_file: {str(path)!r} names another preset file; valid: one level")
    return fields


_VALID = {
    "preset": preset_help(),
    "scheduling": "prefill_first, chunked",
    "kv_precision": "fp16, bf16, fp8",
    "kv_allocation": "reserve, on_demand",
    "interconnect": "nvlink, pcie",
}


def _describe(err: ErrorDetails) -> str:
    loc = ".".join(str(x) for x in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"sim.{loc}: unknown field; valid: {', '.join(SimConfig.model_fields)}"
    if not loc:  # a model-level check: its message starts with the field it is about
        loc, _, msg = msg.partition(": ")
    valid = _VALID.get(loc)
    if valid and "valid:" not in msg:
        msg = f"{msg}; valid: {valid}"
    return f"sim.{loc}: {msg}"
