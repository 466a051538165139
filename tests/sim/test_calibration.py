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


H100_FP8_ROWS = [
    "trt-h100-llama31-8b-fp8-128-2048",
    "trt-h100-llama31-8b-fp8-1000-1000",
    "trt-h100-llama31-8b-fp8-2048-128",
]


def test_status_names_the_rows_of_the_runs_own_model_precision_gpu_and_engine():
    """llama3-8b FP8 on an H100, KV reserved as TensorRT-LLM's rows ran it: those three rows,
    each with its error."""
    got = status(SimConfig.from_dict({"preset": "llama3-8b-fp8@h100"}))
    assert got["status"] == "calibrated"
    assert [r["id"] for r in got["rows"]] == H100_FP8_ROWS
    first = next(r for r in rows() if r.id == H100_FP8_ROWS[0])
    assert got["rows"][0]["error_pct"] == round(first.error_pct, 1)
    assert got["summary"] == (
        "calibrated: 3 row(s) of the calibration table cover llama3-8b fp8 on h100 as tensorrt-llm ran "
        "it (kv_allocation reserve, scheduling chunked): trt-h100-llama31-8b-fp8-128-2048 +13.4 %, "
        "trt-h100-llama31-8b-fp8-1000-1000 +7.8 %, trt-h100-llama31-8b-fp8-2048-128 -1.2 %"
    )


def test_an_fp16_run_is_not_calibrated_by_fp8_rows():
    """llama3-8b FP16 on an H100: the table's H100 rows are FP8, so none is its own; the summary
    names them as another twin's."""
    got = status(SimConfig.from_dict({"preset": "llama3-8b-fp16@h100"}))
    assert (got["status"], got["rows"]) == ("uncalibrated", [])
    assert got["summary"] == (
        "uncalibrated: no row of the calibration table covers llama3-8b fp16 on h100 (kv_allocation "
        "reserve, scheduling chunked); 3 row(s) of llama3-8b on h100 are another twin's: tensorrt-llm "
        "llama3-8b fp8 on h100 (kv_allocation reserve, scheduling chunked)"
    )
    fp8_kv = status(SimConfig.from_dict({"preset": "llama3-8b-fp16@h100", "kv_precision": "fp8"}))
    assert fp8_kv["status"] == "uncalibrated"  # FP8 KV alone does not make FP8 weights


def test_a_run_of_another_engines_scheduler_is_not_calibrated_by_its_rows():
    """Llama-3.1-8B BF16 on an A100 40GB: vLLM's rows (KV blocks on demand) vouch for a run that
    takes them on demand, not for one that reserves them as the simulator does by default."""
    reserve = status(SimConfig.from_dict({"preset": "llama3-8b-bf16@a100-40gb"}))
    assert (reserve["status"], reserve["rows"]) == ("uncalibrated", [])
    assert reserve["summary"].endswith(
        "; 2 row(s) of llama3-8b on a100-40gb are another twin's: vllm llama3-8b bf16 on a100-40gb "
        "(kv_allocation on_demand, scheduling chunked)"
    )
    own = status(SimConfig.from_dict({"preset": "llama3-8b-bf16@a100-40gb", "kv_allocation": "on_demand"}))
    assert own["status"] == "calibrated"
    assert [r["id"] for r in own["rows"]] == [
        "vllm-a100-40gb-llama31-8b-c1-tpot",
        "vllm-a100-40gb-llama31-8b-c8-gain",
    ]
    assert {r["engine"] for r in own["rows"]} == {"vllm"}
    fp16 = status(SimConfig.from_dict({"preset": "llama3-8b-fp16@a100-40gb", "kv_allocation": "on_demand"}))
    assert fp16["status"] == "uncalibrated"  # BF16 rows are not FP16's


def test_every_row_covers_its_own_preset():
    """Each row's own twin (its preset with its sim: settings) is covered by it: no row is
    unreachable by the rule."""
    for r in rows():
        got = status(r.config())
        assert r.id in [x["id"] for x in got["rows"]], r.id


def test_status_uncalibrated_without_a_row_or_with_other_efficiencies():
    """No row covers Mistral on an L4; a run that changes the efficiencies is not the simulator
    the rows measured, and says so."""
    none = status(SimConfig.from_dict({"preset": "mistral-7b-fp8@l4"}))
    assert none == {
        "status": "uncalibrated",
        "summary": "uncalibrated: no row of the calibration table covers mistral-7b fp8 on l4 "
        "(kv_allocation reserve, scheduling chunked)",
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
