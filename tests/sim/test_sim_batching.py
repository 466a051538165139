"""The mechanisms batching brings (docs/simulator.md, "Batching mechanisms"), each checked from
first principles (a block count or a step's time against the formula) and by the calibration
row that moves because of it."""

from __future__ import annotations

import dataclasses
import math

import pytest

from loadgen.sim import Engine, Seq, SimConfig, SimConfigError, simulate
from loadgen.sim.calibration import predict, rows
from loadgen.sim.metrics import Metrics
from loadgen.sim.physics import LINK_EFFICIENCY, LINK_LATENCY_S, Physics

ROWS = {r.id: r for r in rows()}


def small_cache(kv_allocation: str) -> SimConfig:
    """Llama-3-8B on an H100 with 16 blocks of 16 tokens: two 96-token prompts fit, their answers
    of 100 tokens do not."""
    return SimConfig.from_dict(
        {
            "preset": "llama3-8b-fp16@h100",
            "max_model_len": 256,
            "num_gpu_blocks": 16,
            "kv_allocation": kv_allocation,
            "prefix_caching": False,
        }
    )


def step_ns(ph: Physics, new: int, kv_read: int, flops: float) -> int:
    """One step's duration as the engine rounds it: roofline + all-reduces + overhead."""
    return round((max(ph.step_times(new, kv_read, flops)) + ph.comm_seconds(new) + ph.overhead_s) * 1e9)


class TestKvOnDemand:
    def test_blocks_follow_the_tokens_written(self):
        """Admission takes the prompt's blocks; each decode step takes one more block exactly when
        prompt + generated tokens pass a multiple of the block size."""
        eng = Engine(small_cache("on_demand"))
        s = Seq(30, 40)
        eng.submit(s)
        eng.step()  # prefill: the first token
        assert s.blocks == math.ceil(30 / 16) == 2
        for _ in range(20):
            eng.step()
            assert s.blocks == math.ceil((30 + s.generated - 1) / 16)  # the last token's KV is next step's
        assert eng.free_blocks == 16 - s.blocks and eng.preemptions == 0

    def test_the_newest_is_preempted_and_recomputes_what_it_had(self):
        """Two 96-token prompts (6 blocks each) grow until both need 9 blocks of 16: at 33 tokens
        each the newer is preempted, waits at the head of the queue until the older finishes, and
        is admitted again to prefill its 96 + 33 tokens in one step that yields its 34th token."""
        config = small_cache("on_demand")
        a, b = simulate(config, [(0, 96, 100), (0, 96, 100)])
        assert len(a.token_vns) == len(b.token_vns) == 100  # no token lost or repeated
        assert b.prefill_len == 96 + 33 and b.admit_no == 2  # its second admission
        assert b.token_vns[32] == a.token_vns[32] < a.token_vns[33]  # in step together, then preempted
        assert b.token_vns[33] > a.token_vns[-1]  # waited for the older one's blocks
        ph = config.physics
        recompute = step_ns(ph, 129, 0, ph.chunk_attention_flops(0, 129))
        assert b.token_vns[33] - a.token_vns[-1] == recompute
        # decoding alone from there: each gap one B=1 step over its context
        gaps = [y - x for x, y in zip(b.token_vns[33:], b.token_vns[34:])]
        assert gaps == [step_ns(ph, 1, 96 + 34 + k, 0.0) for k in range(len(gaps))]

    def test_preemptions_are_counted_where_vllm_counts_them(self):
        """The engine's counter is what /metrics says as vllm:num_preemptions_total."""
        config = small_cache("on_demand")
        eng = Engine(config)
        for _ in range(2):
            eng.submit(Seq(96, 100))
        while eng.has_work():
            eng.step()
        assert eng.preemptions == 1
        text = Metrics(config.served_model_name).render_engine(eng)
        assert 'vllm:num_preemptions_total{model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 1' in text

    def test_blocks_and_context_add_up_through_preemptions(self):
        """Eight requests on the 16-block cache: every step, the blocks held and free add up to
        the cache and the context is what the decoding sequences hold; all end, none cut short."""
        eng = Engine(small_cache("on_demand"))
        seqs = [Seq(40 + 8 * i, 90) for i in range(8)]
        for s in seqs:
            eng.submit(s)
        while eng.has_work():
            eng.step()
            held = sum(s.blocks for s in seqs)
            assert held + eng.free_blocks == 16
            assert eng.decode_context == sum(s.prompt_len + s.generated for s in eng.decoding)
        assert all(s.generated == 90 for s in seqs) and eng.preemptions > 0

    def test_reserve_never_preempts_and_admits_what_the_whole_answer_fits(self):
        """The same two requests reserved whole (13 blocks each): the second waits for the first."""
        eng = Engine(small_cache("reserve"))
        a, b = Seq(96, 100), Seq(96, 100)
        eng.submit(a)
        eng.submit(b)
        eng.step()
        assert a.blocks == math.ceil(196 / 16) == 13 and b.blocks == 0 and list(eng.waiting) == [b]
        while eng.has_work():
            eng.step()
        assert eng.preemptions == 0

    def test_a_bad_policy_names_the_field(self):
        with pytest.raises(SimConfigError, match=r"sim\.kv_allocation: .*valid: reserve, on_demand"):
            SimConfig.from_dict({"kv_allocation": "lazy"})


class TestTheStepsTokenBudget:
    def test_a_mixed_step_costs_the_roofline_of_its_decodes_and_chunk(self):
        """Four sequences decoding and a 3000-token prompt under a 1024-token budget: the step
        decodes the four and prefills the first 1020 prompt tokens, and costs exactly the
        roofline of 1024 new tokens reading the four contexts, plus the chunk's attention."""
        config = SimConfig.from_dict({"preset": "llama3-8b-fp16@h100", "max_num_batched_tokens": 1024})
        eng = Engine(config)
        olds = [Seq(100, 50) for _ in range(4)]
        for s in olds:
            eng.submit(s)
        eng.step()  # their prefill (400 tokens, one step)
        long = Seq(3000, 5)
        eng.submit(long)
        ph = config.physics
        context = sum(s.prompt_len + s.generated for s in olds)
        step = eng.step()
        assert long.prefilled == 1020 and len(step.emitted) == 4
        assert step.duration_ns == step_ns(ph, 1024, context, ph.chunk_attention_flops(0, 1020))
        step = eng.step()  # the next chunk reads the 1020 before it
        assert long.prefilled == 2040
        assert step.duration_ns == step_ns(ph, 1024, context + 4 + 1020, ph.chunk_attention_flops(1020, 1020))

    def test_the_batch_cap_holds_a_decode_step_to_its_size(self):
        """max_num_seqs 4 of 8 requests: the decode step is the B=4 roofline, the rest wait."""
        config = SimConfig.from_dict({"preset": "llama3-8b-fp16@h100", "max_num_seqs": 4})
        eng = Engine(config)
        for _ in range(8):
            eng.submit(Seq(64, 10))
        eng.step()
        step = eng.step()
        assert eng.num_running == 4 and len(eng.waiting) == 4
        assert step.duration_ns == step_ns(config.physics, 4, 4 * 65, 0.0)


class TestTensorParallel:
    def test_a_step_pays_two_all_reduces_a_layer(self):
        """Llama-3-70B FP8 on 4 H100s over NVLink: a 2048-token prefill's all-reduces are 2 x 80
        of (8 us + 2 x 3/4 x 2048 x 8192 x 2 bytes / (450 GB/s x 0.8)), added to the roofline."""
        config = SimConfig.from_dict({"preset": "llama3-70b-fp8@h100", "tensor_parallel_size": 4})
        ph = config.physics
        one = LINK_LATENCY_S["nvlink"] + 2 * 3 / 4 * 2048 * 8192 * 2 / (450e9 * LINK_EFFICIENCY)
        assert ph.comm_seconds(2048) == pytest.approx(2 * 80 * one, rel=1e-12)
        (s,) = simulate(config, [(0, 2048, 1)])
        assert s.token_vns[0] == step_ns(ph, 2048, 0, ph.chunk_attention_flops(0, 2048))
        assert ph.comm_seconds(2048) * 1e3 == pytest.approx(23.6, abs=0.05)  # of its 99.1 ms

    def test_pcie_costs_more_and_one_gpu_nothing(self):
        nv = SimConfig.from_dict({"preset": "llama3-70b-fp8@h100", "tensor_parallel_size": 4}).physics
        pcie = SimConfig.from_dict(
            {"preset": "llama3-70b-fp8@h100", "tensor_parallel_size": 4, "interconnect": "pcie"}
        ).physics
        alone = SimConfig.from_dict({"preset": "llama3-8b-fp16@h100"}).physics
        assert pcie.comm_seconds(2048) / nv.comm_seconds(2048) == pytest.approx(
            (25e-6 + 1.5 * 2048 * 8192 * 2 / (64e9 * 0.8)) / (8e-6 + 1.5 * 2048 * 8192 * 2 / (450e9 * 0.8))
        )
        assert alone.comm_seconds(2048) == 0.0
        # TP adds up bandwidth and memory: the group's decode step reads a quarter of the weights each
        assert nv.bandwidth == pytest.approx(4 * 3.35e12 * 0.8)

    def test_cards_without_nvlink_use_pcie_and_refuse_nvlink(self):
        l40s = SimConfig.from_dict({"preset": "llama3-8b-fp16@l40s", "tensor_parallel_size": 2})
        assert l40s.physics.link_bandwidth == pytest.approx(32e9 * LINK_EFFICIENCY)
        with pytest.raises(
            SimConfigError, match=r"sim\.interconnect: the NVIDIA L40S has no NVLink; valid: pcie"
        ):
            SimConfig.from_dict({"preset": "llama3-8b-fp16@l40s", "interconnect": "nvlink"})


class TestFp8:
    def test_fp8_weights_take_the_fp8_peak_where_the_gpu_has_one(self):
        """A 2048-token prefill's compute time halves on an H100 (FP8 tensor cores) and stays on
        an A100 (weight-only FP8), whose decode step still reads half the bytes."""
        h16, h8 = (SimConfig.from_dict({"preset": f"llama3-8b-{p}@h100"}).physics for p in ("fp16", "fp8"))
        a16, a8 = (SimConfig.from_dict({"preset": f"llama3-8b-{p}@a100"}).physics for p in ("fp16", "fp8"))
        flops = h16.chunk_attention_flops(0, 2048)
        assert h8.step_times(2048, 0, flops)[1] == pytest.approx(
            h16.step_times(2048, 0, flops)[1] / 2, rel=0.01
        )
        assert a8.step_times(2048, 0, flops)[1] == a16.step_times(2048, 0, flops)[1]
        assert a8.step_times(1, 0)[0] == pytest.approx(a16.step_times(1, 0)[0] / 2)


# --- each mechanism moves a row of the calibration table toward what was measured -------------


def error(row, value: float) -> float:
    return abs(value - row.measured) / row.measured


@pytest.mark.parametrize(
    ("row_id", "without"),
    [
        ("trt-a100-llama7b-b60", {"sim": {"max_num_seqs": 60}}),  # KV reserved whole
        ("trt-l40s-llama7b-fp8-b64", {"sim": {"max_num_seqs": 64}}),
        ("vllm-a100-40gb-llama31-8b-c8-gain", {"sim": {"kv_allocation": "on_demand"}}),  # 8192 budget
        ("trt-a100-llama7b-b384", {"sim": {}}),  # the default batch cap of 256
        ("trt-h100-llama7b-fp8-ttft2048", {"preset": "llama2-7b-fp16@h100"}),  # FP16 weights
    ],
)
def test_the_mechanism_moves_its_row_toward_the_measurement(row_id, without):
    row = ROWS[row_id]
    with_it, without_it = predict(row), predict(dataclasses.replace(row, **without))
    assert error(row, without_it) > error(row, with_it) + 0.02, (with_it, without_it)


@pytest.mark.parametrize(
    "row_id",
    [
        "trt-h100-tp4-llama70b-fp8-ttft2048",
        "trt-h100-tp2-llama33-70b-fp8-1000-1000",
        "trt-h100-tp2-llama33-70b-fp8-128-2048",
    ],
)
def test_the_all_reduces_move_the_tensor_parallel_rows(row_id, monkeypatch):
    row = ROWS[row_id]
    with_it = predict(row)
    monkeypatch.setattr(Physics, "comm_seconds", lambda self, n: 0.0)
    assert error(row, predict(row)) > error(row, with_it) + 0.1
