"""Workload generation: seeded lengths, arrival processes, prompts and request specs."""

import importlib.util

import numpy as np
import pytest
from scipy import stats

from loadgen.config import LoadConfig, WorkloadConfig
from loadgen.workload import Workload, build_schedule
from loadgen.workload.arrivals import arrival_offsets_ns, offsets_until
from loadgen.workload.lengths import describe, sample_lengths
from loadgen.workload.prompts import TextPrompts, TokenizerPrompts

LOGNORMAL = {"kind": "lognormal", "mean": 512, "sigma": 0.6, "max": 4096}


def config(**kw) -> WorkloadConfig:
    return WorkloadConfig.model_validate({"num_requests": 100, **kw})


def gaps_s(offsets: np.ndarray) -> np.ndarray:
    return np.diff(offsets) / 1e9


class TestLengths:
    def test_uniform_within_bounds(self):
        """Uniform lengths stay within [min, max] and average their midpoint."""
        v = sample_lengths(
            config(input_tokens={"kind": "uniform", "min": 3000, "max": 7000}).input_tokens,
            20000,
            np.random.default_rng(0),
        )
        assert (v.min(), v.max()) == (3000, 7000)
        assert v.mean() == pytest.approx(5000, rel=0.01)

    def test_lognormal_mean_is_in_tokens(self):
        """A lognormal's `mean` is the mean length in tokens, and `max` clips the tail."""
        v = sample_lengths(config(input_tokens=LOGNORMAL).input_tokens, 50000, np.random.default_rng(0))
        assert v.dtype == np.int64 and v.min() >= 1 and v.max() <= 4096
        assert v.mean() == pytest.approx(512, rel=0.02)

    def test_normal_clipped(self):
        """A normal is clipped to its bounds."""
        dist = config(
            input_tokens={"kind": "normal", "mean": 150, "std": 40, "min": 32, "max": 256}
        ).input_tokens
        v = sample_lengths(dist, 20000, np.random.default_rng(0))
        assert (v.min(), v.max()) == (32, 256)
        assert v.mean() == pytest.approx(150, rel=0.02)

    def test_empirical_resamples_values(self):
        """Empirical lengths only take the given values."""
        dist = config(input_tokens={"kind": "empirical", "values": [5, 7]}).input_tokens
        assert set(sample_lengths(dist, 100, np.random.default_rng(0)).tolist()) == {5, 7}

    def test_describe(self):
        """describe() gives the summary of realised values."""
        assert describe([1, 2, 3, 4]) == pytest.approx(
            {
                "count": 4,
                "mean": 2.5,
                "std": 1.118034,
                "min": 1,
                "p50": 2.5,
                "p90": 3.7,
                "p99": 3.97,
                "max": 4,
            }
        )
        assert describe([])["count"] == 0 and describe([])["p99"] is None


class TestArrivals:
    def test_poisson_gaps_are_exponential(self):
        """Poisson inter-arrivals pass a KS test against Exp(mean 1/rate)."""
        gaps = gaps_s(arrival_offsets_ns(5001, 8.0, "poisson", 1.0, seed=7))
        assert stats.kstest(gaps, "expon", args=(0, 1 / 8)).pvalue > 0.01

    def test_constant_gaps_are_not_exponential(self):
        """The same KS test rejects constant gaps, so it has power."""
        gaps = gaps_s(arrival_offsets_ns(5001, 8.0, "constant"))
        assert stats.kstest(gaps, "expon", args=(0, 1 / 8)).pvalue < 0.01

    def test_constant_gaps_exact(self):
        """Constant arrivals start at 0 and are exactly 1/rate apart."""
        assert arrival_offsets_ns(4, 8.0, "constant").tolist() == [0, 125_000_000, 250_000_000, 375_000_000]

    @pytest.mark.parametrize("burstiness, cv", [(0.25, 2.0), (4.0, 0.5)])
    def test_gamma_cv(self, burstiness, cv):
        """Gamma gaps keep mean 1/rate and have CV 1/sqrt(burstiness)."""
        gaps = gaps_s(arrival_offsets_ns(50001, 10.0, "gamma", burstiness, seed=1))
        assert gaps.mean() == pytest.approx(0.1, rel=0.05)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)

    def test_offsets_until_is_a_prefix(self):
        """offsets_until(d) is every offset before d, the same as the first n of the n-form."""
        until = offsets_until(30.0, 5.0, "poisson", seed=3)
        full = arrival_offsets_ns(len(until) + 1, 5.0, "poisson", seed=3)
        assert until.tolist() == full[:-1].tolist()
        assert until[-1] < 30e9 <= full[-1]

    def test_build_schedule(self):
        """Open loop schedules num_requests plus warm-up; closed loop has none."""
        wl = config(num_requests=10)
        assert len(build_schedule(LoadConfig(rate=4, warmup_requests=2), wl)) == 12
        assert build_schedule(LoadConfig(concurrency=4), wl) is None
        both = config(num_requests=1000, duration_s=2.0)
        assert build_schedule(LoadConfig(rate=4, arrival="constant"), both).tolist() == [
            0,
            250_000_000,
            500_000_000,
            750_000_000,
            1_000_000_000,
            1_250_000_000,
            1_500_000_000,
            1_750_000_000,
        ]


class TestWorkload:
    def test_same_seed_same_specs(self):
        """The same seed gives identical specs; another seed gives different ones."""
        cfg = config(input_tokens=LOGNORMAL, output_tokens={"kind": "uniform", "min": 1, "max": 500})
        a, b = Workload(cfg).take(50), Workload(cfg).take(50)
        c = Workload(cfg.model_copy(update={"seed": 1})).take(50)
        assert a == b
        assert [s.prompt_tokens for s in a] != [s.prompt_tokens for s in c]

    def test_block_cache_order_independent(self):
        """Request i is the same whether built in order or at random across blocks."""
        cfg = config(input_tokens=LOGNORMAL)
        in_order = Workload(cfg).take(3000)
        shuffled = Workload(cfg)
        for i in np.random.default_rng(0).permutation(3000)[:300]:
            assert shuffled.request(int(i)) == in_order[i]

    def test_token_ids_exact_and_unique_openings(self):
        """Token-id prompts have exactly the sampled length and distinct first two ids."""
        cfg = config(input_tokens={"kind": "uniform", "min": 2, "max": 300})
        wl = Workload(cfg, "completions", "token_ids")
        specs = wl.take(1000)
        assert all(len(s.prompt) == s.prompt_tokens == wl.lengths(s.id)[0] for s in specs)
        assert len({tuple(s.prompt[:2]) for s in specs}) == 1000
        assert all(100 <= t < 2000 for s in specs for t in s.prompt)
        assert specs[0].messages is None and wl.approximate_prompt_lengths is False

    def test_text_prompts_start_uniquely(self):
        """Chat prompts are approximate, word-counted, and open with a per-request prefix."""
        wl = Workload(config(input_tokens=200))
        specs = wl.take(1000)
        assert wl.approximate_prompt_lengths is True
        assert len({" ".join(s.prompt.split()[:4]) for s in specs}) == 1000
        assert {len(s.prompt.split()) for s in specs} == {200}
        assert specs[3].messages == [{"role": "user", "content": specs[3].prompt}]

    def test_system_prompt_is_shared_and_counted(self):
        """A system prompt is identical across requests and counts toward input tokens."""
        wl = Workload(config(input_tokens=100, prompt={"system_prompt_tokens": 30}))
        a, b = wl.request(0), wl.request(1)
        assert a.messages[0] == b.messages[0]
        assert len(a.messages[0]["content"].split()) == 30
        assert (a.prompt_tokens, len(a.prompt.split())) == (100, 70)

    def test_realised(self):
        """realised() summarises the lengths of the requests actually made."""
        wl = Workload(config(input_tokens=64, output_tokens=8))
        assert wl.realised([0, 5, 9]) == {
            "input_tokens": {
                "count": 3,
                "mean": 64.0,
                "std": 0.0,
                "min": 64.0,
                "p50": 64.0,
                "p90": 64.0,
                "p99": 64.0,
                "max": 64.0,
            },
            "output_tokens": {
                "count": 3,
                "mean": 8.0,
                "std": 0.0,
                "min": 8.0,
                "p50": 8.0,
                "p90": 8.0,
                "p99": 8.0,
                "max": 8.0,
            },
        }


class _Encoding:
    def __init__(self, ids):
        self.ids = ids


class SplitTokenizer:
    """A stand-in tokenizer: words of up to 4 letters are one token, longer words two."""

    def __init__(self):
        self.pieces: list[str] = []

    def _id(self, piece: str) -> int:
        self.pieces.append(piece)
        return len(self.pieces) - 1

    def encode(self, text, add_special_tokens=True):
        ids = []
        for k, word in enumerate(text.split(" ")):
            lead = " " if k else ""
            ids += [self._id(lead + word[:4])] + ([self._id(word[4:])] if word[4:] else [])
        return _Encoding(ids)

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids)


class TestTokenizerPrompts:
    def test_exact_length(self):
        """With a tokenizer the prompt encodes to exactly the sampled length."""
        tok = SplitTokenizer()
        wl = Workload(config(input_tokens={"kind": "uniform", "min": 5, "max": 400}), tokenizer=tok)
        assert wl.approximate_prompt_lengths is False
        for spec in wl.take(50):
            assert len(tok.encode(spec.prompt).ids) == spec.prompt_tokens == wl.lengths(spec.id)[0]

    def test_prefix_is_unique(self):
        """Tokenizer prompts keep the unique per-request opening."""
        prompts = TokenizerPrompts(SplitTokenizer())
        assert prompts.build(0, 50)[0].startswith(TextPrompts.prefix(0))
        assert prompts.build(1, 50)[0].startswith(TextPrompts.prefix(1))

    def test_missing_tokenizers_package(self, tmp_path):
        """Without the tokenizers package, asking for one says how to install it."""
        if importlib.util.find_spec("tokenizers") is not None:
            pytest.skip("tokenizers is installed")
        (tmp_path / "tokenizer.json").write_text("{}")
        cfg = config(prompt={"tokenizer": str(tmp_path / "tokenizer.json")})
        with pytest.raises(ImportError, match=r"pip install 'loadgen\[tokenizer\]'"):
            Workload(cfg)
