"""Model and GPU presets from public model cards and spec sheets, and preset-name parsing.

A preset name reads ``<model>-<precision>[-kv<precision>]@<gpu>``: ``llama2-13b-fp16@h200``,
``llama3-8b-fp8@h100``, ``llama3-8b-fp8-kvfp16@h100``. Without ``-kv...`` the KV cache uses the
weight precision. Every model x precision x GPU combination parses; whether the model fits is
checked by the config, not here.

GPU figures are the vendor's dense (non-sparse) tensor-core peaks and HBM bandwidth, memory in
decimal GB as printed on the spec sheet (the usable capacity is a little higher, so KV capacity
comes out slightly conservative). GPUs without FP8 tensor cores (A100) run FP8 weights as
weight-only quantisation (vLLM's Marlin path): half the bytes, FP16 math.

Power (``sim/gpu.py``): the board power is the spec sheet's maximum (TDP / "max thermal design
power"); the idle power is not on any spec sheet, it is what ``nvidia-smi`` typically shows for
an idle board with a model loaded (a modelling figure, said so in docs/simulator.md); the SM
clock is the spec sheet's maximum boost clock, reported as a constant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRECISION_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's size and geometry (from its config.json / model card)."""

    key: str
    hf_name: str  # the served model name by default
    params: float  # parameter count P
    layers: int  # L
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_context: int

    @property
    def d_kv(self) -> int:
        """KV width per layer: KV heads x head dim (5120 for Llama-2-13B MHA, 1024 for Llama-3 GQA)."""
        return self.n_kv_heads * self.head_dim


@dataclass(frozen=True)
class GpuSpec:
    """One GPU: HBM bandwidth (bytes/s), dense FP16/BF16 and FP8 peaks (FLOP/s), HBM bytes,
    and the power figures the simulated DCGM exporter reads (watts, MHz)."""

    key: str
    name: str
    hbm_bandwidth: float
    fp16_flops: float
    fp8_flops: float | None  # None: no FP8 tensor cores, FP8 weights compute at FP16 rate
    memory_bytes: float
    board_watts: float  # the spec sheet's maximum board power (TDP)
    idle_watts: float  # a loaded, idle board (typical nvidia-smi reading, not a spec figure)
    sm_clock_mhz: int  # maximum boost clock
    # Tensor parallelism's links, bytes/s per direction from the spec sheet (which prints both
    # directions added): NVLink (None: the board has none) and the PCIe slot; ``link`` is the
    # one a TP group uses unless the config says otherwise.
    nvlink_bandwidth: float | None
    pcie_bandwidth: float
    link: str

    def link_bandwidth(self, link: str) -> float:
        """Per-direction bytes/s of ``link`` (``nvlink`` or ``pcie``); ValueError when the board
        has no such link."""
        if link == "pcie":
            return self.pcie_bandwidth
        if self.nvlink_bandwidth is None:
            raise ValueError(f"the {self.name} has no NVLink")
        return self.nvlink_bandwidth

    def flops_for(self, precision: str) -> float:
        """Peak FLOP/s when the weights are stored in ``precision``."""
        if precision == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        return self.fp16_flops


MODELS: dict[str, ModelSpec] = {
    m.key: m
    for m in (
        ModelSpec("llama2-7b", "meta-llama/Llama-2-7b-chat-hf", 6.74e9, 32, 4096, 32, 32, 128, 4096),
        ModelSpec("llama2-13b", "meta-llama/Llama-2-13b-chat-hf", 13.0e9, 40, 5120, 40, 40, 128, 4096),
        ModelSpec("llama3-8b", "meta-llama/Meta-Llama-3-8B-Instruct", 8.03e9, 32, 4096, 32, 8, 128, 8192),
        ModelSpec("llama3-70b", "meta-llama/Meta-Llama-3-70B-Instruct", 70.6e9, 80, 8192, 64, 8, 128, 8192),
        ModelSpec("mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3", 7.25e9, 32, 4096, 32, 8, 128, 32768),
        ModelSpec("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", 7.62e9, 28, 3584, 28, 4, 128, 32768),
        # The integration suite's model (scripts/real_engines.py builds it: 2 layers, d_model 256,
        # 4 heads, MLP 1024, a 2048-word vocabulary, untied embeddings; 3,147,008 parameters),
        # so `loadgen sim fit` can make a twin of the real vLLM the suite serves on this CPU.
        ModelSpec("tiny-llama", "tiny-llama", 3_147_008, 2, 256, 4, 4, 64, 2048),
    )
}

# fmt: off
GPUS: dict[str, GpuSpec] = {
    g.key: g
    for g in (
        # key, name, HBM bytes/s, FP16 and FP8 FLOP/s, memory; board and idle W, boost MHz;
        # per direction: NVLink and PCIe bytes/s, and the link a TP group uses.
        # NVLink 3 600 GB/s and PCIe Gen4 x16 64 GB/s both directions; H100/H200 SXM NVLink 4
        # 900 GB/s, PCIe Gen5 128 GB/s; H100 PCIe's NVLink bridge pairs two cards at 600 GB/s.
        GpuSpec("a100", "NVIDIA A100-SXM4-80GB", 2.039e12, 312e12, None, 80e9,
                400, 60, 1410, 300e9, 32e9, "nvlink"),
        GpuSpec("a100-40gb", "NVIDIA A100-SXM4-40GB", 1.555e12, 312e12, None, 40e9,
                400, 55, 1410, 300e9, 32e9, "nvlink"),
        GpuSpec("h100", "NVIDIA H100-SXM5-80GB", 3.35e12, 989e12, 1979e12, 80e9,
                700, 75, 1980, 450e9, 64e9, "nvlink"),
        GpuSpec("h100-pcie", "NVIDIA H100-PCIe-80GB", 2.0e12, 756e12, 1513e12, 80e9,
                350, 50, 1755, 300e9, 64e9, "pcie"),
        GpuSpec("h200", "NVIDIA H200-SXM-141GB", 4.8e12, 989e12, 1979e12, 141e9,
                700, 75, 1980, 450e9, 64e9, "nvlink"),
        GpuSpec("l4", "NVIDIA L4", 0.3e12, 121e12, 242e12, 24e9,
                72, 16, 2040, None, 32e9, "pcie"),
        GpuSpec("l40s", "NVIDIA L40S", 0.864e12, 362e12, 733e12, 48e9,
                350, 35, 2520, None, 32e9, "pcie"),
        # Not a GPU: the 2-core x86 machine the project is developed and tested on, where the
        # integration suite runs vLLM's CPU build. Nominal peaks for a fit to take fractions of:
        # 2 AVX2 cores at 3 GHz (2 FMA x 8 lanes: 96 GFLOP/s each), the L3 cache's ~96 GB/s a core
        # (a tiny model's weights stay in it), the machine's 24 GB; power a modelling figure.
        GpuSpec("cpu", "2 AVX2 cores (x86, the development machine)", 192e9, 192e9, None, 24e9,
                30, 5, 3000, None, 16e9, "pcie"),
    )
}
# fmt: on

# Longer spellings people type; they resolve to the keys above.
GPU_ALIASES = {"a100-80gb": "a100", "a100-sxm": "a100", "h100-sxm": "h100", "h200-sxm": "h200"}

_PRESET = re.compile(
    r"^(?P<model>.+?)-(?P<prec>fp16|bf16|fp8)(?:-kv(?P<kv>fp16|bf16|fp8))?@(?P<gpu>[\w.-]+)$"
)


@dataclass(frozen=True)
class Preset:
    model: ModelSpec
    precision: str
    kv_precision: str | None  # None: same as the weights
    gpu: GpuSpec


def preset_help() -> str:
    """The 'valid: ...' text for errors: the grammar, every model and every GPU."""
    return (
        "<model>-<fp16|bf16|fp8>[-kv<fp16|bf16|fp8>]@<gpu> with model one of "
        + ", ".join(MODELS)
        + " and gpu one of "
        + ", ".join(GPUS)
        + " (e.g. llama3-8b-fp16@h100)"
    )


def parse_preset(name: str) -> Preset:
    """Parse a preset name; ValueError names what is wrong and lists what is valid."""
    m = _PRESET.match(name.strip().lower())
    if m is None:
        raise ValueError(f"cannot parse preset {name!r}")
    model = MODELS.get(m["model"])
    gpu_key = GPU_ALIASES.get(m["gpu"], m["gpu"])
    gpu = GPUS.get(gpu_key)
    if model is None or gpu is None:
        problems = []
        if model is None:
            problems.append(f"unknown model {m['model']!r}")
        if gpu is None:
            problems.append(f"unknown GPU {m['gpu']!r}")
        raise ValueError(" and ".join(problems))
    return Preset(model, m["prec"], m["kv"], gpu)
