"""A stage's drain limit (``Stage.drain_s``, what a capacity screen runs with): the requests still
in flight that long after the stage's end are cancelled, each with one record saying the stage
cut it, and the run goes on (it is not interrupted); without the limit every one finishes."""

from __future__ import annotations

import pytest

from loadgen.config.stages import Stage
from loadgen.records import CANCELLED
from loadgen.result import load_records
from loadgen.runner.plan import FixedPlan

import helpers


def _run(tmp_path, drain_s):
    # 20 req/s for 1 s of 400-token answers on the simulator (about 4 s each): at the stage's end
    # nearly every request is still streaming.
    prof = helpers.profile(
        tmp_path,
        None,
        sim={"preset": "llama3-8b-fp16@h100"},
        load__concurrency=None,
        load__rate=20.0,
        workload__num_requests=None,
        workload__duration_s=1.0,
        workload__output_tokens=400,
        target__ignore_eos=True,
    )
    stage = Stage(0, "rate=20", None, 20.0, "poisson", 1.0, None, 1.0, None, 0.0, 0, drain_s=drain_s)
    res = helpers.run(prof, plan=FixedPlan([stage]))
    return res, load_records(res.run_dir)


@pytest.mark.slow
def test_a_drain_limit_cuts_what_is_in_flight_and_the_run_goes_on(tmp_path):
    res, records = _run(tmp_path / "cut", 0.5)
    cut = [r for r in records if r.error_class == CANCELLED]
    started = min(r.t_sched_ns for r in records)
    assert cut and len(records) == res.summary["counts"]["sent"]
    assert all("drain limit" in (r.error_message or "") for r in cut)
    assert not res.summary.get("interrupted")
    # every cut request ended at the cut (1.5 s after the first send, give or take the loop)
    ends = [(r.t_end_ns - started) / 1e9 for r in cut]
    assert min(ends) == pytest.approx(1.5, abs=0.1) and max(ends) == pytest.approx(1.5, abs=0.2)

    whole, all_records = _run(tmp_path / "whole", None)
    assert not [r for r in all_records if r.error_class == CANCELLED]
    assert all(r.ok for r in all_records)
