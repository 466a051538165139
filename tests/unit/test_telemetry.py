"""GPU telemetry from where it lives: DCGM exporter text (a fixture in the exporter's published
format, its default field list from NVIDIA/dcgm-exporter's etc/default-counters.csv) parsed into
one row per GPU, and the summary's telemetry block from literal readings: energy from the
counter's difference (never power x time), counters that reset or go backwards, GPUs that
vanish, a source without an energy counter, and a run without sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.server import dcgm
from loadgen.server.gpu_scraper import NO_SOURCES, Source, TelemetrySeries
from loadgen.server.telemetry import conditions, telemetry_block

FIXTURE = Path(__file__).parents[1] / "fixtures" / "dcgm" / "h100x2.prom"
S = 1_000_000_000
UUID0 = "GPU-5fa8e1c4-0d3b-7c21-9a4e-3f0c6b2d8e11"
UUID1 = "GPU-a2d47b90-6e15-4c8f-b7d3-1e9f5a6c0b42"
ID = {"gpu": "0", "uuid": UUID0, "model": "NVIDIA H100 80GB HBM3", "host": "gpu-node-a"}


def reading(t_s: float, energy_mj: float | None, power_w: float | None = 999.0, **kw) -> dict:
    """One GPU's row at ``t_s``; the power is 999 W unless said, far from what the counter says,
    so a figure computed from power would show."""
    row = {"t_ns": int(t_s * S), "source": "http://gpu-node-a:9400/metrics", **ID, "util_pct": 50.0}
    row.update({"fb_used_mib": 1000.0, "fb_free_mib": 80000.0, "power_w": power_w, "energy_mj": energy_mj})
    row.update({"sm_clock_mhz": 1980.0, **kw})
    return row


def series(rows: list[dict]) -> TelemetrySeries:
    return TelemetrySeries([Source("dcgm", "http://gpu-node-a:9400/metrics", len(rows))], 1.0, rows)


class TestDcgmText:
    def test_the_exporters_default_fields_become_one_row_per_gpu(self):
        """Units as the exporter says: %, MiB, W, mJ, MHz; the fields loadgen does not read
        (temperatures, clocks of memory, PCIe, NVLink, ...) are left out."""
        assert dcgm.gpu_rows(FIXTURE.read_bytes()) == [
            {
                **ID,
                "util_pct": 97.0,
                "fb_used_mib": 72899.0,
                "fb_free_mib": 8141.0,
                "power_w": 512.337,
                "energy_mj": 6396375061.0,
                "sm_clock_mhz": 1980.0,
            },
            {
                "gpu": "1",
                "uuid": UUID1,
                "model": "NVIDIA H100 80GB HBM3",
                "host": "gpu-node-a",
                "util_pct": 3.0,
                "fb_used_mib": 15137.0,
                "fb_free_mib": 65903.0,
                "power_w": 118.921,
                "energy_mj": 5188203114.0,
                "sm_clock_mhz": 1755.0,
            },
        ]

    def test_the_lines_a_scrape_keeps_parse_to_the_same_rows(self):
        """During the load only the read fields' lines are kept (no TYPE lines, so the energy
        counter is not renamed ..._total by the parser): the rows are the same."""
        body = FIXTURE.read_bytes()
        kept = b"\n".join(line for line in body.split(b"\n") if line.startswith(dcgm.WANTED))
        assert kept.count(b"\n") + 1 == 12  # six fields, two GPUs
        assert dcgm.gpu_rows(kept) == dcgm.gpu_rows(body)

    def test_a_gpu_without_uuid_is_named_by_host_and_index(self):
        text = 'DCGM_FI_DEV_GPU_UTIL{gpu="3",Hostname="n1"} 40\n'
        assert dcgm.gpu_rows(text)[0]["uuid"] == "n1/3"

    def test_not_prometheus_text_is_refused(self):
        with pytest.raises(ValueError):
            dcgm.gpu_rows(b"<html>403 Forbidden</html>")


class TestTelemetryBlock:
    def test_energy_is_the_counters_difference_interpolated_to_the_window(self):
        """Counter 0, 100, 300, 600 J at 0-3 s; window 0.5-2.5 s: 450 - 50 = 400 J (the 999 W
        readings would say 1998 J). 1000 output and 3000 total tokens in it."""
        rows = [reading(0, 0), reading(1, 100_000), reading(2, 300_000), reading(3, 600_000)]
        block = telemetry_block(series(rows), (int(0.5 * S), int(2.5 * S)), (1000, 3000), 0.2, False)
        assert block is not None
        gpu = block["gpus"][0]
        assert gpu["energy_j"] == pytest.approx(400.0)
        assert (gpu["samples"], gpu["counter_resets"], gpu["estimated_s"]) == (2, 0, 0.0)
        assert gpu["power_mean_w"] == 999.0 and gpu["utilization_mean"] == 0.5
        assert gpu["memory_used_peak_bytes"] == 1000 * 2**20
        e = block["energy"]
        assert e["joules"] == pytest.approx(400.0) and e["seconds"] == 2.0 and e["gpus"] == 1
        assert e["j_per_output_token"] == pytest.approx(0.4)
        assert e["j_per_total_token"] == pytest.approx(400 / 3000)
        assert e["output_tokens_per_j"] == pytest.approx(2.5)
        assert e["mean_watts"] == pytest.approx(200.0)
        assert e["kwh"] == pytest.approx(400 / 3.6e6)
        assert e["usd_per_million_output_tokens"] == pytest.approx(0.2 * 400 / 3.6e6 / 1000 * 1e6)
        assert e["complete"] is True and block["notes"] == []

    def test_a_counter_that_resets_has_that_interval_from_power_and_says_so(self):
        """100 J, then a reset (100 J -> 5 J), then 300 J more: the reset's second is the mean of
        its two power readings (100 and 140 W), 120 J; 520 J in all."""
        rows = [
            reading(0, 0, 80),
            reading(1, 100_000, 100),
            reading(2, 5_000, 140),
            reading(3, 305_000, 300),
        ]
        block = telemetry_block(series(rows), (0, 3 * S), (520, 520), None, False)
        assert block is not None
        gpu = block["gpus"][0]
        assert gpu["energy_j"] == pytest.approx(520.0)
        assert (gpu["counter_resets"], gpu["estimated_s"]) == (1, 1.0)
        assert block["energy"]["complete"] is False
        assert block["notes"] == [
            f"GPU 0 ({UUID0}, NVIDIA H100 80GB HBM3): its energy counter went backwards 1 time(s) "
            "(a reset or a wrap); 1.00 s of the window are power x time instead"
        ]

    def test_a_counter_that_steps_back_a_little_is_a_reset_too(self):
        rows = [reading(0, 0, 100), reading(1, 100_000, 100), reading(2, 99_000, 100), reading(3, 199_000)]
        gpu = telemetry_block(series(rows), (0, 3 * S), (1, 1), None, False)["gpus"][0]  # type: ignore[index]
        assert gpu["energy_j"] == pytest.approx(100 + 100 + 100)
        assert gpu["counter_resets"] == 1

    def test_a_gpu_that_vanishes_counts_to_its_last_reading_and_is_said(self):
        """GPU 1 answers at 0 and 1 s, then is gone while GPU 0 is read to 3 s."""
        gone = {"gpu": "1", "uuid": UUID1}
        rows = [reading(t, 100_000 * t) for t in range(4)]
        rows += [reading(0, 0, **gone), reading(1, 50_000, **gone)]
        rows.sort(key=lambda r: r["t_ns"])
        block = telemetry_block(series(rows), (0, 3 * S), (700, 700), None, False)
        assert block is not None
        g0, g1 = block["gpus"]
        assert (g0["vanished"], g0["covered_fraction"], g0["energy_j"]) == (False, 1.0, pytest.approx(300.0))
        assert (g1["vanished"], g1["covered_fraction"], g1["energy_j"]) == (True, 1 / 3, pytest.approx(50.0))
        assert block["energy"]["joules"] == pytest.approx(350.0)
        assert block["energy"]["complete"] is False
        assert block["notes"] == [
            f"GPU 1 ({UUID1}, NVIDIA H100 80GB HBM3) vanished: its last reading was 1.00 s into the "
            "window; its figures cover the window up to it"
        ]

    def test_without_an_energy_counter_there_is_no_energy_and_no_power_x_time(self):
        rows = [reading(t, None, 400) for t in range(3)]
        block = telemetry_block(series(rows), (0, 2 * S), (100, 100), None, False)
        assert block is not None
        assert "energy" not in block and block["gpus"][0]["energy_j"] is None
        assert block["gpus"][0]["power_mean_w"] == 400.0
        assert block["notes"] == [
            "no GPU gave an energy counter: energy per token is not computed (never power x time)"
        ]

    def test_a_run_without_sources_has_no_block_and_says_why(self):
        nothing = TelemetrySeries([], 1.0, [], note=NO_SOURCES)
        assert telemetry_block(nothing, (0, S), (1, 1), None, False) is None
        assert conditions(nothing) == {"sources": [], "note": "no telemetry sources configured"}


class TestServerViewOverlay:
    def test_gpu_memory_sits_on_the_kv_panels_clock_and_stages_are_marked(self):
        """Two GPUs' memory (MiB -> GB) on a right-hand axis, seconds from the window's start;
        a dashed line where the second stage's window starts."""
        from loadgen.report.plots import new_figure
        from loadgen.report.telemetry_plot import mark_stages, memory_overlay

        ax = new_figure().subplots()
        rows = [
            reading(10.0, 0, fb_used_mib=1000.0),
            reading(11.0, 0, fb_used_mib=3000.0),
            reading(10.5, 0, gpu="1", uuid=UUID1, fb_used_mib=2000.0),
        ]
        twin = memory_overlay(ax, rows, 9 * S)
        assert [(list(line.get_xdata()), list(line.get_ydata())) for line in twin.get_lines()] == [
            ([1.0, 2.0], [1000 * 2**20 / 1e9, 3000 * 2**20 / 1e9]),
            ([1.5], [2000 * 2**20 / 1e9]),
        ]
        assert memory_overlay(ax, [], 0) is None
        stages = {
            "stages": [
                {"index": 0, "window": {"start_ns": 9 * S}},
                {"index": 1, "window": {"start_ns": 12 * S}},
            ]
        }
        mark_stages(ax, 9 * S, stages)  # type: ignore[arg-type]
        assert [list(line.get_xdata()) for line in ax.get_lines()] == [[3.0, 3.0]]
