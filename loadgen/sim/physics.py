"""The seed chapter's roofline arithmetic (5.1.6, 5.1.7) as functions of one model on one GPU.

One forward step that processes T new tokens while reading K cached tokens costs

    max((W + K * kv_bytes_per_token) / achieved bandwidth,
        (2 * P * T + attention FLOP) / achieved FLOP/s)  +  fixed overhead

A decode step for B sequences holding C context tokens is T = B, K = C (the chapter's formula;
decode attention FLOP are left out, as there). A prefill of n prompt tokens is T = n, K = 0, plus
causal attention's quadratic term 2 * L * d_model * n^2, which makes it compute-bound. A chunk of
c prompt tokens after k already-prefilled ones costs 4 * L * d_model * c * (k + c / 2) attention
FLOP, so the chunks of one prompt add up to the whole prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .presets import PRECISION_BYTES, GpuSpec, ModelSpec


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
    overhead_s: float  # fixed per step (launches, scheduling, sampling)
    memory_bytes: float  # HBM across the tensor-parallel group

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
    ) -> Physics:
        """Tensor parallelism multiplies bandwidth, FLOP/s and memory (communication is ignored)."""
        tp = tensor_parallel_size
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
        )

    def step_seconds(self, new_tokens: int, kv_read_tokens: int, attention_flops: float = 0.0) -> float:
        """One forward step: the roofline maximum of memory time and compute time, plus overhead."""
        memory, compute = self.step_times(new_tokens, kv_read_tokens, attention_flops)
        return max(memory, compute) + self.overhead_s

    def step_times(
        self, new_tokens: int, kv_read_tokens: int, attention_flops: float = 0.0
    ) -> tuple[float, float]:
        """(memory time, compute time) of one step, each as if it ran alone: the simulated GPU's
        power (``gpu.py``) reads how much of the step each keeps busy."""
        memory = (self.weight_bytes + kv_read_tokens * self.kv_bytes_per_token) / self.bandwidth
        compute = (2.0 * self.params * new_tokens + attention_flops) / self.flops
        return memory, compute

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
