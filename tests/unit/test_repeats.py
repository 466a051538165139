"""Between-repeat statistics: the t quantile, the t interval of a mean, Welch's ratio interval,
and the gate's decision on repeat values (analysis/repeats.py, analysis/gate_repeats.py)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from loadgen.analysis import gate_repeats as gr
from loadgen.analysis import repeats as rp
from loadgen.config.gate_rules import GateRule
from loadgen.sim.prefix_cache import PrefixCache, block_hashes


class TestTQuantile:
    @pytest.mark.parametrize("df", [1, 2, 2.7, 4, 9, 29, 500])
    @pytest.mark.parametrize("p", [0.9, 0.975, 0.995])
    def test_matches_scipy(self, df, p):
        """The quantile computed without scipy equals scipy's to 1e-7 (relative), fractional df too."""
        assert rp.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-7)


class TestTInterval:
    def test_three_values(self):
        """mean ± t(0.975, 2) · sd / sqrt(3), sd with n - 1."""
        iv = rp.t_interval([10.0, 12.0, 14.0])
        half = stats.t.ppf(0.975, 2) * 2.0 / math.sqrt(3)
        assert (iv.n, iv.mean, iv.sd) == (3, 12.0, 2.0)
        assert (iv.low, iv.high) == (pytest.approx(12 - half), pytest.approx(12 + half))

    def test_one_value_has_no_interval_and_none_is_left_out(self):
        """A repeat without the figure (None) is not a value; one value gives a mean only."""
        assert rp.t_interval([None, 5.0]) == rp.TInterval(1, 5.0, None, None, None)
        assert rp.t_interval([]) == rp.TInterval(0, None, None, None, None)


class TestWelchRatio:
    def test_against_the_delta_method_by_hand(self):
        """r = mean_c / mean_b; se and df from the two variance terms (Welch-Satterthwaite)."""
        c, b = [11.0, 12.0, 13.0], [10.0, 10.5, 9.5]
        r = 12.0 / 10.0
        a, bb = 1.0 / 3, r**2 * 0.25 / 3
        df = (a + bb) ** 2 / (a**2 / 2 + bb**2 / 2)
        half = stats.t.ppf(0.975, df) * math.sqrt(a + bb) / 10.0
        got = rp.welch_ratio(c, b)
        assert got is not None
        assert (got.estimate, got.df) == (pytest.approx(r), pytest.approx(df))
        assert (got.low, got.high) == (pytest.approx(r - half), pytest.approx(r + half))

    def test_a_single_baseline_value_counts_as_exact(self):
        """Against one number only the candidate's spread counts: df = n_c - 1."""
        got = rp.welch_ratio([9.0, 11.0], 10.0)
        assert got is not None and got.df == pytest.approx(1.0)
        assert got.high - 1.0 == pytest.approx(stats.t.ppf(0.975, 1) * math.sqrt(2) / math.sqrt(2) / 10)


class TestGateOnRepeats:
    RULE = GateRule(metric="tpot_ms", stat="p50", max_regression=0.10)

    def test_every_repeat_slower_fails(self):
        """Three repeats 50 % slower than three steady ones: the whole interval is past +10 %."""
        status, base, cand, iv, noise, msg = gr.check(self.RULE, [15.0, 15.2, 14.9], [10.0, 10.1, 9.9], 0.95)
        assert (status, noise) == ("fail", False) and iv is not None and iv.low > 1.1
        assert "Welch t over the repeats (3 candidate, 3 baseline" in msg

    def test_one_slow_repeat_is_noise_not_a_verdict(self):
        """One repeat of three 50 % slower moves the mean past the bound, but the interval
        still reaches inside it: pass, flagged within noise."""
        status, _b, _c, iv, noise, _m = gr.check(self.RULE, [10.0, 10.1, 15.0], [10.0, 10.1, 9.9], 0.95)
        assert (status, noise) == ("pass", True) and iv is not None and iv.estimate > 1.1

    def test_too_few_repeats_with_data_fail(self):
        """A candidate whose repeats have no such data is not passed by default."""
        assert gr.check(self.RULE, [10.0], [10.0, 10.0], 0.95)[0] == "fail"


def test_prefix_cache_clear_forgets_blocks_keeps_counters():
    """The simulator's reset hook empties the cache; vLLM's counters keep counting."""
    cache = PrefixCache(capacity_blocks=8, block_size=2)
    hashes = block_hashes([1, 2, 3, 4, 5], 2)
    cache.insert(hashes)
    assert cache.admit(hashes, 5) == 4
    cache.clear()
    assert (len(cache), cache.lookup(hashes, 5), cache.hits) == (0, 0, 4)
