"""`loadgen sim fit` against the real vLLM (CPU build, the tiny model): a twin fitted on three
stages of a sweep predicts the fourth stage, which the fit never saw.

The simulator's presets name the suite's model (`tiny-llama`) and this machine's two cores
(`cpu`, nominal peaks the fit takes fractions of); vLLM's `/metrics` gives the twin its KV
blocks. The held-out stage is c=4, between the fitted c=1, 2 and 8: the twin is asked what a
user asks of it, the server at a load it was not measured at.

What the fit moves: FLOP/s, the step's fixed cost and its cost per sequence (vLLM's CPU build
samples, detokenises and schedules each sequence in Python: milliseconds a step, which a GPU
server spends in microseconds). Bandwidth stays at the preset's default: the 6 MB of weights sit
in the CPU's cache and no stage's time depends much on it, so the default three-parameter fit
refuses this sweep, naming bandwidth_efficiency, as it should; on some sweeps (2026-12-04) the
KV reads at c=8 move the predictions just past the sensitivity threshold and it does not.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from loadgen.analysis import sim_fit, sim_fit_model
from loadgen.runner import api

from .conftest import profile_maker

pytestmark = pytest.mark.integration
pytest.importorskip("scipy", reason="loadgen sim fit needs the fit extra (in the test extra)")

PRESET = "tiny-llama-bf16@cpu"
HELD_OUT = "c=4"
PARAMS = ("flops_efficiency", "step_overhead_ms", "seq_overhead_ms")
# The server's scheduler, which no run records: vLLM's defaults for `vllm serve` on a device
# other than an H100-class GPU (arg_utils.get_batch_defaults: a 2048-token step budget) and its
# KV blocks on demand. With the simulator's own default budget (8192) three prompts of 512 tokens
# prefill in one step that stalls every decode, and the held-out TPOT came out +19 to +22 %.
SERVER = {"max_num_batched_tokens": 2048, "kv_allocation": "on_demand"}


def test_a_twin_fitted_on_three_stages_predicts_the_fourths_tpot(vllm, tmp_path, record_property):
    """Four closed-loop stages of 512-token prompts and 64-token answers; the fit on c=1, 2, 8
    predicts c=4's median TPOT within 15 % and its throughput within 25 %; every figure's
    held-out residual (TTFT p50 and p99 too) is printed and attached to the JUnit XML."""
    make = profile_maker(vllm, tmp_path)
    profile = make(
        **{
            "target.endpoint": "completions",
            "target.ignore_eos": True,
            "workload.num_requests": None,
            "load.concurrency": None,
            "workload.input_tokens": 512,
            "workload.output_tokens": 64,
            "load.sweep": {"concurrency": [1, 2, 4, 8], "stage_duration_s": 20, "ramp_s": 0},
        }
    )
    res = asyncio.run(api.run_async(profile))
    source = sim_fit.read_run(res.run_dir, preset=PRESET, settings=SERVER)
    assert [s.name for s in source.stages] == ["c=1", "c=2", "c=4", "c=8"]
    held = next(s for s in source.stages if s.name == HELD_OUT)
    train = dataclasses.replace(source, stages=[s for s in source.stages if s is not held])
    # The default three: on a 3 M-parameter model on CPU, which of bandwidth and FLOPs no stage
    # pins depends on the machine (bandwidth in an earlier session; FLOPs on a fresh one, 2026-12-07).
    try:
        default = sim_fit.fit(train)
    except sim_fit.FitRejected as exc:  # without a cost per sequence the three miss its stages
        print(f"the default fit is rejected: {exc}")
    except sim_fit.FitError as exc:
        assert any(f"do not identify {p}" in str(exc) for p in sim_fit_model.PARAMS), exc
        print(f"the default fit refuses: {exc}")
    else:
        print(f"the default fit passed its sensitivity check this time: {default.params}")
    try:
        fitted, rejected = sim_fit.fit(train, PARAMS, drop_weak=True), None
    except sim_fit.FitRejected as exc:  # reported with its residuals; the held-out check still runs
        fitted, rejected = exc.fit, str(exc)
    record_property("rejected", rejected)
    record_property(
        "fitted_residuals_pct", [{m: round(r, 1) for m, r in row.items()} for row in fitted.residuals_pct()]
    )
    assert "num_gpu_blocks" in fitted.config_fields()  # read from vLLM's cache_config_info
    predicted = sim_fit.predict(fitted.config_fields(), held, fitted.request_latency_ms)
    errors = {m: predicted[m] / held.measured[m] - 1 for m in sim_fit.METRICS}
    record_property("fitted", {**fitted.params, "request_latency_ms": fitted.request_latency_ms})
    record_property("held_out_errors_pct", {m: round(e * 100, 1) for m, e in errors.items()})
    print(
        f"fit {fitted.params} ({rejected or 'accepted'}), held-out {HELD_OUT}: measured {held.measured}, "
        f"predicted {predicted}, errors {errors}"
    )
    assert abs(errors["tpot_p50_ms"]) <= 0.15
    assert abs(errors["output_tokens_per_s"]) <= 0.25
