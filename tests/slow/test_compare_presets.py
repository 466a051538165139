"""Two simulated GPUs swept side by side: the compare overlay is drawn and its capacity table
orders them as their memory bandwidths do (H100 3.35 TB/s, A100 2.0 TB/s: decode is
memory-bound, so the H100 serves more at every load level and keeps the SLA further)."""

from __future__ import annotations

import json

import pytest

from loadgen import compare
from loadgen.report import compare as compare_report

from helpers import profile, run

STAGES = [4, 16, 64]


def sweep(out, gpu: str):
    return run(
        profile(
            out,
            None,
            **{
                "workload.num_requests": None,  # the sweep sets the load
                "load.concurrency": None,
                "sim.preset": f"llama3-8b-fp16@{gpu}",
                "load.sweep": {"concurrency": STAGES, "stage_duration_s": 3.0},
                "workload.input_tokens": 128,
                "workload.output_tokens": 32,
                "labels": {"gpu": gpu},
                "sla.rules": ["p99 ttft_ms < 700"],
                "output.dir": str(out),
                "output.run_id": gpu,
                "server_metrics.enabled": False,
            },
        )
    )


@pytest.mark.slow
@pytest.mark.serial  # two sweeps to saturation: alone, not beside another worker
def test_the_overlay_is_drawn_and_capacity_follows_bandwidth(tmp_path):
    h100, a100 = sweep(tmp_path, "h100"), sweep(tmp_path, "a100")
    fast = [p["throughput_rps"] for p in h100.summary["curve"]["points"]]
    slow = [p["throughput_rps"] for p in a100.summary["curve"]["points"]]
    assert all(f > 1.3 * s for f, s in zip(fast, slow))  # more served at every load level

    written = compare_report.write(compare([h100.run_dir, a100.run_dir]), tmp_path / "cmp")
    names = {p.name for p in written}
    assert {"curve_ttft_ms_p99.png", "curve_tpot_ms_p99.png", "curve_output_tokens_per_s.png"} <= names
    capacity = json.loads((tmp_path / "cmp" / "compare.json").read_text())["curves"]["capacity"]
    assert [c["label"] for c in capacity] == ["gpu=h100", "gpu=a100"]
    assert capacity[0]["value"] > capacity[1]["value"]  # the table orders them as bandwidth does
    assert "Capacity at the SLA" in (tmp_path / "cmp" / "compare.md").read_text()
