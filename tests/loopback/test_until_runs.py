"""--until against the built-in simulator: a stage stops once its statistic's interval is as tight as
asked, and not long after (checked against the interval recomputed from its own records in the
order they finished); a stage that never gets there ends at its time limit and says so."""

from __future__ import annotations

import pytest

from loadgen.analysis.precision import MIN_SAMPLES, interval, record_value
from loadgen.config.until import parse_until
from loadgen.errors import RunError
from loadgen.result import load_records

import helpers
from helpers import run

C = 8


def until_profile(tmp_path, until: str, duration_s: float, **extra):
    return helpers.profile(
        tmp_path,
        None,
        **{
            "workload.num_requests": None,
            "workload.duration_s": duration_s,
            "load.concurrency": C,
            "load.until": until,
            "sim.preset": "llama3-8b-fp16@h100",
            "workload.output_tokens": 16,
            **extra,
        },
    )


@pytest.mark.slow
def test_a_stage_stops_once_the_interval_is_tight_and_not_long_after(tmp_path):
    res = run(until_profile(tmp_path, "p50 ttft_ms ±10%", 30.0))
    s = res.summary
    assert s["ended_by"]["limit"] == "until", s["ended_by"]
    prec = s["precision"]
    assert prec["reached"] and prec["half_width_at_stop"] <= 0.10 and prec["until"] == "p50 ttft_ms ±10%"
    # The requests in flight when it stopped finish after the check: the final interval stays near.
    assert prec["half_width"] <= 0.15 and prec["samples"] - prec["samples_at_stop"] <= C
    # When could it first have stopped? Replay the measured ok records in the order they finished.
    value = record_value("ttft_ms")
    done = sorted((r for r in load_records(res.run_dir) if r.ok and not r.warmup), key=lambda r: r.t_end_ns)
    values = [value(r) for r in done]
    # The check runs at 30 values, then each time they grew by a twentieth (8 at least); the
    # interval is not monotone in n (tight at 39, loose again at 46 happened), so the replay checks
    # where the stage checks, not at every n.
    checks, n = [], MIN_SAMPLES
    while n <= len(values):
        checks.append(n)
        n += max(8, n // 20)
    first = next(n for n in checks if (iv := interval(values[:n], "p50")) and iv.half_width <= 0.10)
    # Then the C requests in flight finish; one check of slack, for the stage adds values in the
    # order their callbacks ran, which may swap neighbours against their end stamps.
    assert first <= len(values) <= first + max(8, first // 20) + C, (first, len(values))
    assert s["window"]["seconds"] < 30.0 and prec["samples"] == len(values)
    assert prec["low"] <= prec["estimate"] == s["metrics"]["ttft_ms"]["p50"] <= prec["high"]


@pytest.mark.slow
def test_a_stage_that_never_gets_there_ends_at_its_time_limit(tmp_path):
    s = run(until_profile(tmp_path, "p99 ttft_ms ±0.1%", 2.0)).summary
    assert s["ended_by"]["limit"] == "duration_s"
    prec = s["precision"]
    assert not prec["reached"] and (prec["half_width"] is None or prec["half_width"] > 0.001)


@pytest.mark.slow
def test_each_stage_of_a_sweep_stops_on_its_own_precision(tmp_path):
    p = until_profile(
        tmp_path,
        "p50 e2e_ms ±10%",
        None,
        **{"load.concurrency": None, "load.sweep": {"concurrency": [2, 4], "stage_duration_s": 20.0}},
    )
    s = run(p).summary
    for stage in s["stages"]:
        assert stage["precision"]["reached"] and stage["window"]["seconds"] < 20.0
        assert stage["load"]["until"] == "p50 e2e_ms ±10%"
    assert parse_until(s["stages"][0]["precision"]["until"]).half_width == 0.10


def test_with_worker_processes_it_is_refused_naming_both(tmp_path):
    with pytest.raises(RunError, match=r"load.until \(--until\) .* without client.workers / --workers"):
        run(until_profile(tmp_path, "p50 ttft_ms ±10%", 2.0, **{"client.workers": 2}))
