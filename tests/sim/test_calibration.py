"""The calibration table (loadgen/sim/calibration.yaml): every public measurement against the
simulator's prediction, recomputed from its engine in virtual time, within the row's stated band."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from loadgen.sim import SimConfig
from loadgen.sim.calibration import METRICS, markdown_table, predict, rows, status
from loadgen.sim.virtual_time import serve_closed_loop

# The issue's aim: TPOT and throughput within 15 %, TTFT within 25 %; a wider band must name the
# mechanism that explains it.
AIM = {"ttft_ms": 25.0, "tpot_ms": 15.0, "output_tokens_per_s": 15.0, "throughput_ratio": 15.0}


@pytest.mark.parametrize("row", rows(), ids=lambda r: r.id)
def test_prediction_within_the_rows_band(row):
    """The simulator's figure, computed now, is within the row's band of the published figure,
    and is the figure the table (and docs/simulator.md) records."""
    got = predict(row)
    assert abs(got - row.measured) / row.measured * 100 <= row.band_pct
    assert got == pytest.approx(row.predicted, rel=1e-3)


def test_table_is_what_the_issue_asks_for():
    """At least 10 rows, each engine named, a URL for each, a metric the module can compute, and
    every band wider than the aim explained by a missing mechanism."""
    table = rows()
    assert len(table) >= 10
    assert len({r.id for r in table}) == len(table)
    for r in table:
        assert r.engine in ("vllm", "sglang", "tensorrt-llm")
        assert r.source.startswith("https://")
        assert r.metric in METRICS
        assert (r.band_pct > AIM[r.metric]) == (r.missing is not None), r.id
    assert {r.engine for r in table} >= {"vllm", "tensorrt-llm"}
    assert len({r.preset.split("@")[1] for r in table}) >= 4  # GPUs


def test_the_documented_table_is_the_data():
    """docs/simulator.md's calibration table is the rows as ``markdown_table`` renders them (a
    line for every row with its recorded error, the footnote with every missing mechanism)."""
    doc = (Path(__file__).parents[2] / "docs" / "simulator.md").read_text()
    start = doc.index("\n", doc.index("<!-- calibration table: generated")) + 1
    table = doc[start : doc.index("<!-- end of the calibration table -->")]
    assert table.strip() == markdown_table().strip(), "run: python -m loadgen.sim.calibration"
    for r in rows():
        line = next(ln for ln in table.splitlines() if ln.startswith(f"| `{r.id}` | "))
        assert f"| {r.error_pct:+.1f} % |" in line


def test_closed_loop_single_stream_is_the_physics():
    """One request alone: TTFT is one prefill step and TPOT one decode step at its context, the
    roofline formulas of physics.py, to the nanosecond the engine rounds to."""
    config = SimConfig.from_dict({"preset": "llama3-8b-fp16@h100", "time_scale": 0})
    ph = config.physics
    run = serve_closed_loop(config, 1000, 3, 1, 1)
    assert run.ttft_ms == pytest.approx(round(ph.prefill_seconds(1000) * 1e9) / 1e6, abs=1e-6)
    steps = [round(ph.decode_step_seconds(1, 1001 + k) * 1e9) for k in range(2)]
    assert run.tpot_ms == pytest.approx(sum(steps) / 2 / 1e6, abs=1e-6)
    assert run.output_tokens_per_s == pytest.approx(3 / ((run.ttft_ms + 2 * run.tpot_ms) / 1e3))


def test_status_names_the_rows_that_cover_the_gpu_and_model():
    """llama3-8b on an H100: the three trtllm-bench H100 rows (FP8), whatever the run's precision,
    each with its error."""
    got = status(SimConfig.from_dict({"preset": "llama3-8b-fp16@h100"}))
    assert got["status"] == "calibrated"
    assert [r["id"] for r in got["rows"]] == [
        "trt-h100-llama31-8b-fp8-128-2048",
        "trt-h100-llama31-8b-fp8-1000-1000",
        "trt-h100-llama31-8b-fp8-2048-128",
    ]
    first = next(r for r in rows() if r.id == "trt-h100-llama31-8b-fp8-128-2048")
    assert got["rows"][0]["error_pct"] == round(first.error_pct, 1)
    assert got["summary"].startswith(
        "calibrated: 3 row(s) of the calibration table cover llama3-8b on h100: "
    )


def test_status_uncalibrated_without_a_row_or_with_other_efficiencies():
    """No row covers Mistral on an L4; a run that changes the efficiencies is not the simulator
    the rows measured, and says so."""
    none = status(SimConfig.from_dict({"preset": "mistral-7b-fp8@l4"}))
    assert none == {
        "status": "uncalibrated",
        "summary": "uncalibrated: no row of the calibration table covers mistral-7b on l4",
        "table": "docs/simulator.md#calibration",
        "rows": [],
    }
    tuned = status(SimConfig.from_dict({"preset": "llama3-8b-fp8@h100", "flops_efficiency": 0.7}))
    assert tuned["status"] == "uncalibrated"
    assert len(tuned["rows"]) == 3
    assert tuned["summary"].endswith(
        "; this run sets flops_efficiency=0.7, so the rows (predicted with the defaults) do not apply"
    )


def test_error_sign_and_size():
    """error_pct is (predicted - measured) / measured: the simulator low is negative."""
    row = next(r for r in rows() if r.id == "trt-a100-llama7b-ttft128")
    assert math.isclose(row.error_pct, (row.predicted - 16) / 16 * 100)
    assert row.error_pct < 0
