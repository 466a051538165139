"""The continuous-batching engine on a virtual clock: admission, KV blocks, queueing tails."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.sim import Engine, Seq, SimConfig, simulate


def cfg(**kw) -> SimConfig:
    return SimConfig(**{"preset": "llama2-13b-fp16@a100", **kw})


def ttft_s(s: Seq) -> float:
    return (s.token_vns[0] - s.arrival_vns) / 1e9


def tpot_s(s: Seq) -> float:
    return (s.token_vns[-1] - s.token_vns[0]) / (len(s.token_vns) - 1) / 1e9


class TestSingleRequest:
    def test_first_token_after_prefill_then_one_per_decode_step(self):
        """prefill_first, alone: TTFT is the prefill step, every later gap one B=1 decode step."""
        c = cfg(scheduling="prefill_first")
        (s,) = simulate(c, [(0, 100, 4)])
        ph = c.physics
        assert s.token_vns[0] == round(ph.prefill_seconds(100) * 1e9)
        gaps = np.diff(s.token_vns)
        expected = [round(ph.decode_step_seconds(1, 100 + k) * 1e9) for k in (1, 2, 3)]
        assert gaps.tolist() == expected

    def test_chunked_prefill_splits_a_long_prompt(self):
        """A 3000-token prompt with a 1024-token budget takes three steps to its first token."""
        c = cfg(max_num_batched_tokens=1024)
        eng = Engine(c)
        eng.submit(Seq(3000, 2))
        steps = [eng.step() for _ in range(3)]
        assert [len(st.emitted) for st in steps] == [0, 0, 1]


class TestKvCapacity:
    def test_admits_exactly_what_fits(self):
        """13B FP16 on A100-80GB: 72 GB - 26 GB of KV holds 27 requests of 2K tokens."""
        c = cfg()
        eng = Engine(c)
        for _ in range(100):
            eng.submit(Seq(1024, 1024))
        for _ in range(20):  # admission is paced by the 8192-token step budget
            eng.step()
        assert c.kv_capacity_bytes / c.physics.kv_bytes(2048) == pytest.approx(27.4, abs=0.1)
        assert eng.num_running == 27 and len(eng.waiting) == 73

    def test_fp8_kv_doubles_it(self):
        eng = Engine(cfg(kv_precision="fp8"))
        for _ in range(100):
            eng.submit(Seq(1024, 1024))
        for _ in range(20):
            eng.step()
        assert eng.num_running == 54

    def test_max_num_seqs_caps_the_batch(self):
        eng = Engine(cfg(max_num_seqs=5))
        for _ in range(10):
            eng.submit(Seq(10, 10))
        eng.step()
        assert eng.num_running == 5

    def test_finished_sequences_free_their_blocks_at_once(self):
        """Everything done: every block is free and the waiting queue drained in-flight."""
        c = cfg()
        seqs = simulate(c, [(0, 1984, 64)] * 60)  # 2048 tokens each: 27 fit
        assert all(len(s.token_vns) == 64 for s in seqs)
        # the 28th request was admitted in the step right after the first sequence finished
        admitted = sorted(s.admitted_vns for s in seqs)
        first_done = min(s.token_vns[-1] for s in seqs)
        assert admitted[26] < first_done and admitted[27] == first_done


class TestQueueing:
    """The chapter's symptom: beyond KV capacity the queue, not the GPU, sets TTFT."""

    @staticmethod
    def run(rate_per_s: float, n: int = 200):
        """13B FP16 on one H200, 1.5K-token prompts, 512-token answers, Poisson arrivals."""
        rng = np.random.default_rng(1)
        arrivals = np.cumsum(rng.exponential(1e9 / rate_per_s, n)).astype(int)
        seqs = simulate(cfg(preset="llama2-13b-fp16@h200"), [(int(a), 1536, 512) for a in arrivals])
        ttft = np.array([ttft_s(s) for s in seqs])
        tpot = np.array([tpot_s(s) for s in seqs])
        queued = np.array([s.admitted_vns - s.arrival_vns > 1e9 for s in seqs])  # waited > 1 s
        return np.percentile(ttft, 99), np.median(tpot), queued.mean()

    def test_p99_ttft_breaks_the_sla_while_tpot_stays_flat(self):
        """KV holds 60 such requests, ~3.8 req/s; at 2x and 4x that p99 TTFT explodes, TPOT holds."""
        light_ttft, light_tpot, light_q = self.run(0.5)
        over2_ttft, over2_tpot, over2_q = self.run(8)
        over4_ttft, over4_tpot, over4_q = self.run(16)
        assert light_q == 0 and light_ttft < 0.7
        assert over2_q > 0.5 and over4_q > 0.5  # most requests waited for blocks
        assert 10 < over2_ttft < over4_ttft
        assert over4_tpot == pytest.approx(over2_tpot, rel=0.05)
        assert over4_tpot < 0.05  # TPOT still meets a 50 ms SLA


def test_a_request_larger_than_the_cache_is_an_error_not_a_hang():
    """simulate() refuses a request whose blocks exceed the whole KV cache."""
    c = cfg(preset="llama3-8b-fp16@l4", max_model_len=4096)
    with pytest.raises(ValueError, match="more KV blocks"):
        simulate(c, [(0, c.num_blocks * c.block_size, 16)])
