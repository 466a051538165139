"""The seed chapter's roofline arithmetic (5.1.6, 5.1.7) as functions of one model on one GPU.

One forward step that processes T new tokens while reading K cached tokens costs

    max((W + K * kv_bytes_per_token) / achieved bandwidth,
        (2 * P * T + attention FLOP) / achieved FLOP/s)  +  fixed overhead

A decode step for B sequences holding C context tokens is T = B, K = C (the chapter's formula;
decode attention FLOP are left out, as there). A prefill of n prompt tokens is T = n, K = 0, plus
causal attention's quadratic term 2 * L * d_model * n^2, which makes it compute-bound. A chunk of
c prompt tokens after k already-prefilled ones costs 4 * L * d_model * c * (k + c / 2) attention
FLOP, so the chunks of one prompt add up to the whole prefill.

Tensor parallelism over n GPUs splits the weights, the KV cache and the math n ways (bandwidth,
FLOP/s and memory add up) and costs two all-reduces a layer (after attention and after the MLP,
Megatron-style) of the step's activations, T x d_model x 2 bytes (16-bit, FP8 models too). A
ring all-reduce moves 2 (n - 1) / n of them over each GPU's link, so one costs

    latency + 2 (n - 1) / n x T x d_model x 2 / (link bandwidth x LINK_EFFICIENCY)

and a step 2 L of them, added to its roofline time (vLLM does not overlap them with compute).
The link is NVLink (per-direction bandwidth on the spec sheet) or PCIe (the slot's, per
direction); the latencies are modelling figures (docs/simulator.md): a custom all-reduce's few
microseconds over NVLink, NCCL's tens over PCIe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .presets import PRECISION_BYTES, GpuSpec, ModelSpec

# Achieved / peak bandwidth of an all-reduce over the link (NCCL's bus bandwidth runs near 80 %
# of NVLink's per-direction peak) and the fixed latency of one all-reduce, by link.
LINK_EFFICIENCY = 0.8
LINK_LATENCY_S = {"nvlink": 8e-6, "pcie": 25e-6}
ACTIVATION_BYTES = 2


def kv_bytes_per_token(layers: int, d_kv: int, precision_bytes: float) -> float:
    """K and V for every layer: 2 x L x d_kv x bytes."""
    return 2 * layers * d_kv * precision_bytes


def max_concurrent_requests(free_bytes: float, kv_bytes_per_request: float) -> int:
    """How many requests' KV caches fit in ``free_bytes`` (the chapter's exercise 3)."""
    return math.floor(free_bytes / kv_bytes_per_request + 1e-9)


@dataclass(frozen=True)
class Physics:
    """Costs of one model on one GPU at given precisions and efficiencies, in seconds and bytes."""

    params: float
    layers: int
    d_model: int
    weight_bytes: float
    kv_bytes_per_token: float
    bandwidth: float  # achieved bytes/s
    flops: float  # achieved FLOP/s
    overhead_s: float  # fixed per step (launches, scheduling)
    memory_bytes: float  # HBM across the tensor-parallel group
    tensor_parallel_size: int = 1
    link_bandwidth: float = 0.0  # achieved bytes/s per direction of each GPU's link (TP > 1)
    link_latency_s: float = 0.0  # one all-reduce's fixed cost
    seq_overhead_s: float = 0.0  # per sequence in a step (sampling, detokenising, bookkeeping)

    @classmethod
    def from_specs(
        cls,
        model: ModelSpec,
        gpu: GpuSpec,
        precision: str = "fp16",
        kv_precision: str | None = None,
        bandwidth_efficiency: float = 1.0,
        flops_efficiency: float = 1.0,
        step_overhead_ms: float = 0.0,
        tensor_parallel_size: int = 1,
        interconnect: str | None = None,
        seq_overhead_ms: float = 0.0,
    ) -> Physics:
        """Tensor parallelism multiplies bandwidth, FLOP/s and memory and adds the all-reduces
        over ``interconnect`` (default: the GPU's own, NVLink on SXM boards, PCIe on cards)."""
        tp = tensor_parallel_size
        link = interconnect or gpu.link
        return cls(
            params=model.params,
            layers=model.layers,
            d_model=model.d_model,
            weight_bytes=model.params * PRECISION_BYTES[precision],
            kv_bytes_per_token=kv_bytes_per_token(
                model.layers, model.d_kv, PRECISION_BYTES[kv_precision or precision]
            ),
            bandwidth=gpu.hbm_bandwidth * bandwidth_efficiency * tp,
            flops=gpu.flops_for(precision) * flops_efficiency * tp,
            overhead_s=step_overhead_ms / 1e3,
            memory_bytes=gpu.memory_bytes * tp,
            tensor_parallel_size=tp,
            link_bandwidth=gpu.link_bandwidth(link) * LINK_EFFICIENCY,
            link_latency_s=LINK_LATENCY_S[link],
            seq_overhead_s=seq_overhead_ms / 1e3,
        )

    def step_seconds(self, new_tokens: int, kv_read_tokens: int, attention_flops: float = 0.0) -> float:
        """One forward step: the roofline maximum of memory time and compute time, plus overhead."""
        memory, compute = self.step_times(new_tokens, kv_read_tokens, attention_flops)
        return max(memory, compute) + self.comm_seconds(new_tokens) + self.overhead_s

    def step_times(
        self, new_tokens: int, kv_read_tokens: int, attention_flops: float = 0.0
    ) -> tuple[float, float]:
        """(memory time, compute time) of one step, each as if it ran alone: the simulated GPU's
        power (``gpu.py``) reads how much of the step each keeps busy."""
        memory = (self.weight_bytes + kv_read_tokens * self.kv_bytes_per_token) / self.bandwidth
        compute = (2.0 * self.params * new_tokens + attention_flops) / self.flops
        return memory, compute

    def comm_seconds(self, new_tokens: int) -> float:
        """The step's tensor-parallel all-reduces: 2 a layer of ``new_tokens`` activations."""
        n = self.tensor_parallel_size
        if n == 1 or new_tokens == 0:
            return 0.0
        moved = 2.0 * (n - 1) / n * new_tokens * self.d_model * ACTIVATION_BYTES
        return 2 * self.layers * (self.link_latency_s + moved / self.link_bandwidth)

    def chunk_attention_flops(self, done: int, chunk: int) -> float:
        """Causal attention FLOP for prompt tokens [done, done + chunk)."""
        return 4.0 * self.layers * self.d_model * chunk * (done + chunk / 2.0)

    def prefill_seconds(self, n: int) -> float:
        """A whole n-token prompt in one step (compute-bound for any real prompt)."""
        return self.step_seconds(n, 0, self.chunk_attention_flops(0, n))

    def decode_step_seconds(self, batch: int, context_tokens: int) -> float:
        """One token for each of ``batch`` sequences that hold ``context_tokens`` in total."""
        return self.step_seconds(batch, context_tokens)

    def decode_tokens_per_s(self, batch: int, context_tokens: int = 0) -> float:
        return batch / self.decode_step_seconds(batch, context_tokens)

    def knee_batch(self) -> float:
        """The batch where weight reading and compute take equal time (KV reads ignored).

        2 P B / F = W / BW  =>  B = F / BW * (2 P / W): the GPU's FLOP/byte ratio for FP16 weights,
        twice that for FP8 weights (half the bytes per parameter).
        """
        return self.flops / self.bandwidth * (2.0 * self.params / self.weight_bytes)

    def kv_bytes(self, tokens: int) -> float:
        return tokens * self.kv_bytes_per_token

    def kv_capacity_bytes(self, gpu_memory_utilization: float) -> float:
        """HBM x utilisation - weights; the rest (1 - utilisation) is the activation/runtime reserve."""
        return self.memory_bytes * gpu_memory_utilization - self.weight_bytes
