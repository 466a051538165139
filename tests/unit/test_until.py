"""--until's grammar (config/until.py) and the intervals behind it (analysis/precision.py), on
literal values: a percentile's distribution-free interval from order statistics, a mean's from
its standard error, and the running check that ends a stage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.analysis.precision import Precision, interval, record_value
from loadgen.config import load_profile
from loadgen.config.until import parse_until
from loadgen.errors import ConfigError

from helpers import ok_record


def test_the_grammar_reads_stat_metric_and_half_width():
    assert parse_until("p99 ttft_ms ±5%") == ("p99", "ttft_ms", 0.05)
    assert parse_until(" p99.9  e2e_ms +- 2.5 % ") == ("p99_9", "e2e_ms", 0.025)
    assert parse_until("mean tpot_ms +/-1%").text() == "mean tpot_ms ±1%"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("p99 ttft_ms < 5%", "grammar: 'stat metric ±pct%'"),
        ("p98 ttft_ms ±5%", "unknown stat 'p98'"),
        ("p99 error_rate ±5%", "'error_rate' is not a per-request latency"),
        ("p99 itl_ms ±5%", "'itl_ms' is not a per-request latency"),
        ("p99 ttft_ms ±0%", "must be above 0 and below 100"),
    ],
)
def test_bad_input_names_the_field_and_the_grammar(text, says):
    with pytest.raises(ConfigError) as e:
        load_profile(None, overrides={"load.concurrency": 2, "workload.num_requests": 4, "load.until": text})
    assert "load.until" in str(e.value) and says in str(e.value)


def test_a_percentiles_interval_is_the_order_statistics_around_it():
    """1..1000: p50 is 500.5; its 95 % ranks are 500 -/+ 1.96 * sqrt(250) = 469.0 .. 531.0,
    rounded outward to 469 and 532."""
    got = interval(np.arange(1, 1001), "p50")
    assert got is not None and got.samples == 1000
    assert (got.estimate, got.low, got.high) == (500.5, 469.0, 532.0)
    assert got.half_width == pytest.approx(31.5 / 500.5)


def test_too_few_values_have_no_interval_yet():
    """p99 of 100 values: its upper rank (99 + 1.96 * sqrt(0.99) + 1) is past the last value."""
    assert interval(np.arange(100), "p99") is None
    assert interval(np.arange(29), "mean") is None and interval(np.arange(29), "p50") is None
    assert interval(np.arange(2000), "p99") is not None


def test_a_means_interval_is_its_standard_error():
    x = np.random.default_rng(0).normal(100, 10, 400)
    got = interval(x, "mean")
    assert got is not None
    assert got.high - got.estimate == pytest.approx(1.959964 * x.std(ddof=1) / 20, rel=1e-6)


def test_the_running_check_reaches_and_stays_reached():
    """Values 90..110 repeating: p50's interval narrows as they come; once within ±1 % the
    tracker says reached and stops checking."""
    p = Precision(parse_until("p50 ttft_ms ±1%"), lambda v: v)
    values = [90.0 + (7 * i) % 21 for i in range(3000)]
    for v in values:
        p.add(v)
        if p.reached:
            break
    assert p.reached and p.last is not None and p.last.half_width <= 0.01
    first = next(
        n for n in range(8, len(values)) if (iv := interval(values[:n], "p50")) and iv.half_width <= 0.01
    )
    assert first <= len(p.values) <= first + max(8, first // 20)  # checked every twentieth


def test_a_records_value_is_the_registrys_formula():
    rec = ok_record(ttft_ms=100, gaps_ms=(10, 10, 10), tokens=(1, 1, 3, 1))
    assert record_value("ttft_ms")(rec) == 100.0
    assert record_value("tpot_ms")(rec) == 6.0  # 30 ms over the 5 tokens after the first
    assert math.isnan(record_value("tpot_ms")(ok_record(gaps_ms=(), tokens=(1,))))
