"""The seed chapter's hand arithmetic (5.1.7), reproduced by the simulator's physics."""

from __future__ import annotations

import pytest

from loadgen.sim import MODELS, GpuSpec, Physics, kv_bytes_per_token, max_concurrent_requests
from loadgen.sim.presets import GPUS

# The chapter's illustrative GPU: ~3 TB/s of HBM (5.1.7.1), H100-class compute.
CHAPTER_GPU = GpuSpec(
    "chapter", "chapter's 3 TB/s GPU", 3e12, 989e12, 1979e12, 80e9, 700, 75, 1980, 450e9, 64e9, "nvlink"
)
LLAMA2_13B = MODELS["llama2-13b"]


def ideal(model=LLAMA2_13B, gpu=CHAPTER_GPU, **kw) -> Physics:
    """Peak bandwidth and FLOP/s, no overhead: the chapter's upper-bound arithmetic."""
    return Physics.from_specs(model, gpu, **kw)


class TestChapterArithmetic:
    def test_13b_fp16_weights_are_26_gb(self):
        """13B parameters x 2 bytes ~ 26 GB."""
        assert ideal().weight_bytes / 1e9 == pytest.approx(26.0, abs=0.1)

    def test_b1_decode_step_at_3_tbs_is_8_7_ms(self):
        """26e9 / 3e12 ~ 8.7 ms per step, ~115 tokens/s for a single request (KV ignored)."""
        p = ideal()
        assert p.decode_step_seconds(1, 0) * 1e3 == pytest.approx(8.7, abs=0.05)
        assert p.decode_tokens_per_s(1) == pytest.approx(115, abs=1)

    def test_kv_per_2k_request_is_1_7_gb(self):
        """2 x L=40 x d_kv=5120 x S=2048 x 2 bytes ~ 1.7 GB, from Llama-2-13B's geometry."""
        assert LLAMA2_13B.d_kv == 5120 and LLAMA2_13B.layers == 40
        assert ideal().kv_bytes(2048) / 1e9 == pytest.approx(1.68, abs=0.01)
        assert kv_bytes_per_token(40, 5120, 2) * 2048 == 1_677_721_600

    def test_exercise_3_concurrency_limits(self):
        """1.6 GB at 2K -> 6.4 GB at 8K; 48 GB holds 30 (2K) or 7 (8K); FP8 KV doubles: 60, 15."""
        per_2k = 1.6e9
        per_8k = per_2k * 8192 / 2048
        assert per_8k == pytest.approx(6.4e9)
        assert max_concurrent_requests(48e9, per_2k) == 30
        assert max_concurrent_requests(48e9, per_8k) == 7
        assert max_concurrent_requests(48e9, per_2k / 2) == 60
        assert max_concurrent_requests(48e9, per_8k / 2) == 15

    def test_fp8_kv_doubles_concurrency_for_13b(self):
        """With Llama-2-13B's own 1.68 GB per 2K request, 48 GB holds 28; FP8 KV holds 57."""
        fp16 = ideal().kv_bytes(2048)
        fp8 = ideal(kv_precision="fp8").kv_bytes(2048)
        assert fp8 == fp16 / 2
        assert max_concurrent_requests(48e9, fp16) == 28
        assert max_concurrent_requests(48e9, fp8) == 57

    def test_fp8_weights_halve_the_memory_bound_step(self):
        """Half the weight bytes, half the B=1 step (5.1.4: quantisation gives speed)."""
        assert ideal(precision="fp8").decode_step_seconds(1, 0) == pytest.approx(
            ideal().decode_step_seconds(1, 0) / 2
        )


class TestRoofline:
    def test_throughput_scales_with_batch_while_memory_bound(self):
        """B=32 reads the same weights as B=1: 32x the tokens/s with no KV."""
        p = ideal(gpu=GPUS["h100"])
        assert p.decode_tokens_per_s(32) / p.decode_tokens_per_s(1) == pytest.approx(32)

    def test_gqa_model_with_kv_reads_still_gains_many_times(self):
        """Llama-3-8B, 1K context per sequence, default efficiencies: B=32 > 20x B=1."""
        p = Physics.from_specs(
            MODELS["llama3-8b"],
            GPUS["h100"],
            bandwidth_efficiency=0.8,
            flops_efficiency=0.5,
            step_overhead_ms=1.0,
        )
        assert p.decode_tokens_per_s(32, 32 * 1024) / p.decode_tokens_per_s(1, 1024) > 20

    def test_knee_is_the_gpus_flop_per_byte_ratio(self):
        """FP16 weights: arithmetic intensity ~ B, so the knee is at B = FLOP/s / bandwidth."""
        p = ideal(gpu=GPUS["h100"])
        knee = p.knee_batch()
        assert knee == pytest.approx(989e12 / 3.35e12)
        below, at, above = (p.decode_tokens_per_s(round(b)) for b in (knee / 2, knee, 2 * knee))
        assert at / below == pytest.approx(2, rel=0.01)  # still linear below the knee
        assert above / at == pytest.approx(1, rel=0.01)  # flat above it: compute-bound

    def test_prefill_is_compute_bound_with_quadratic_attention(self):
        """2 P n + 2 L d n^2 FLOP at peak, far above the weight-read time."""
        p = ideal(model=MODELS["llama3-8b"], gpu=GPUS["h100"])
        n = 2048
        flops = 2 * 8.03e9 * n + 2 * 32 * 4096 * n * n
        assert p.prefill_seconds(n) == pytest.approx(flops / 989e12)
        assert p.prefill_seconds(n) > 5 * p.weight_bytes / p.bandwidth

    def test_prompt_chunks_add_up_to_the_whole_prefill(self):
        """Four 512-token chunks carry the same attention FLOP as one 2048-token prefill."""
        p = ideal()
        chunks = sum(p.chunk_attention_flops(k, 512) for k in range(0, 2048, 512))
        assert chunks == pytest.approx(p.chunk_attention_flops(0, 2048))
