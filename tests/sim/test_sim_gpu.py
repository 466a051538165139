"""The simulator's GPU (sim/gpu.py): power from how compute- and bandwidth-bound each step is,
an energy counter that integrates it exactly over the engine's time, utilisation as the busy
share of the last engine second, memory as weights plus KV blocks in use, served at
/dcgm/metrics in the DCGM exporter's format."""

from __future__ import annotations

import httpx
import pytest

from loadgen.server import dcgm
from loadgen.sim import SimConfig
from loadgen.sim.engine import Engine, Seq, Step
from loadgen.sim.gpu import MEMORY_BOUND_SHARE, GpuMeter, SimGpus, step_watts
from loadgen.sim.presets import GPUS

H100 = GPUS["h100"]
MS = 1_000_000


def step(duration_ms: float, memory_ms: float, compute_ms: float) -> Step:
    return Step(int(duration_ms * MS), [], [], [], memory_ms / 1e3, compute_ms / 1e3)


class TestPower:
    def test_spec_sheet_figures(self):
        """Board power from the spec sheets; idle a typical loaded-idle reading."""
        assert {k: (g.board_watts, g.idle_watts) for k, g in GPUS.items()} == {
            "a100": (400, 60),
            "a100-40gb": (400, 55),
            "h100": (700, 75),
            "h100-pcie": (350, 50),
            "h200": (700, 75),
            "l4": (72, 16),
            "l40s": (350, 35),
            "cpu": (30, 5),  # the development machine's two cores: a modelling figure
        }

    def test_a_decode_step_draws_by_its_compute_and_memory_shares(self):
        """7 ms: 6 ms of weight reads, 2 ms of math: 75 + 625 x (2/7 + 0.6 x 6/7) W."""
        assert step_watts(H100, step(7, 6, 2)) == pytest.approx(75 + 625 * (2 / 7 + 0.6 * 6 / 7))
        assert MEMORY_BOUND_SHARE == 0.6

    def test_a_compute_bound_step_draws_the_board_power_and_no_step_idles(self):
        assert step_watts(H100, step(50, 3, 49)) == 700
        assert step_watts(H100, step(0, 0, 0)) == 75

    def test_all_reduces_count_as_memory_time_and_draft_passes_as_their_own(self):
        """10 ms: 4 ms of weight reads and 1 ms of math in the target's pass, 2 ms of all-reduce,
        a draft model's 2 ms of reads and 0.5 ms of math: 75 + 625 x (1.5/10 + 0.6 x 8/10) W."""
        s = Step(10 * MS, [], [], [], 0.004, 0.001, 0.002, 0.002, 0.0005)
        assert step_watts(H100, s) == pytest.approx(75 + 625 * (1.5 / 10 + 0.6 * 8 / 10))

    def test_an_engine_step_carries_its_all_reduce_and_draft_times(self):
        """The engine's own steps: on 4 GPUs the decode step's all-reduce time is
        ``comm_seconds`` of its tokens; with a draft model (k=3, cost 0.05) its passes' times
        are 3 x 0.05 of the plain decode's roofline times, the target verifying 4 tokens a
        sequence."""
        tp = Engine(SimConfig.from_dict({"preset": "llama3-70b-fp8@h100", "tensor_parallel_size": 4}))
        drafts = {"num_speculative_tokens": 3, "spec_acceptance": 0.5, "draft_cost": 0.05}
        drafts["prefix_caching"] = False
        spec = Engine(SimConfig.from_dict({"preset": "llama3-8b-fp16@h100", **drafts}))
        for eng in (tp, spec):
            for _ in range(4):
                eng.submit(Seq(64, 32))
            eng.step()  # the prefills
        context = spec.decode_context
        t, d = tp.step(), spec.step()
        assert t.comm_s == pytest.approx(tp.physics.comm_seconds(4)) and t.comm_s > 0
        assert (t.draft_memory_s, t.draft_compute_s) == (0.0, 0.0)
        plain_memory, plain_compute = spec.physics.step_times(4, context)
        assert d.draft_memory_s == pytest.approx(0.15 * plain_memory)
        assert d.draft_compute_s == pytest.approx(0.15 * plain_compute)
        assert d.comm_s == 0.0
        without_drafts = Step(d.duration_ns, [], [], [], d.memory_s, d.compute_s)
        assert step_watts(H100, d) > step_watts(H100, without_drafts)

    def test_fp16_weights_draw_more_power_and_energy_per_token_than_fp8(self):
        """The same 16 requests on one H100: FP16 reads twice the bytes per step, so its steps
        are longer and more of each is bandwidth-bound."""
        figures = {}
        for preset in ("llama3-8b-fp16@h100", "llama3-8b-fp8@h100"):
            engine = Engine(SimConfig(preset=preset))
            for _ in range(16):
                engine.submit(Seq(256, 128))
            joules = seconds = 0.0
            while engine.has_work():
                s = engine.step()
                joules += step_watts(H100, s) * s.duration_ns / 1e9
                seconds += s.duration_ns / 1e9
            figures[preset] = (joules / seconds, joules / engine.generation_tokens_total)
        (w16, j16), (w8, j8) = figures.values()
        assert w16 > w8 and j16 > 1.5 * j8


class TestEnergyCounter:
    def test_steps_and_idle_integrate_exactly(self):
        """At time_scale 0.5 a 10 ms step takes 5 ms of wall time; a reading halfway has half
        its energy; idle wall time counts idle power x wall / time_scale."""
        meter = GpuMeter(H100, 0.5, 0)
        s = step(10, 8, 1)
        watts = step_watts(H100, s)
        meter.begin(0, s)
        assert meter.energy_j(int(2.5 * MS)) == pytest.approx(watts * 0.005)
        assert meter.energy_j(5 * MS) == pytest.approx(watts * 0.010)
        assert meter.watts(3 * MS) == watts and meter.watts(6 * MS) == 75
        assert meter.energy_j(15 * MS) == pytest.approx(watts * 0.010 + 75 * 0.020)
        meter.begin(15 * MS, s)
        assert meter.energy_j(20 * MS) == pytest.approx(2 * watts * 0.010 + 75 * 0.020)

    def test_a_late_step_never_overlaps_the_one_before(self):
        meter = GpuMeter(H100, 1.0, 0)
        meter.begin(0, step(10, 8, 1))
        meter.begin(5 * MS, step(10, 8, 1))  # asked to start inside the first: starts at its end
        assert meter.energy_j(20 * MS) == pytest.approx(2 * step_watts(H100, step(10, 8, 1)) * 0.010)

    def test_utilisation_is_the_busy_share_of_the_last_engine_second(self):
        meter = GpuMeter(H100, 1.0, 0)
        meter.begin(0, step(300, 250, 10))
        meter.begin(600 * MS, step(100, 90, 1))
        assert meter.utilization(1000 * MS) == pytest.approx(0.4)
        assert meter.utilization(1500 * MS) == pytest.approx(0.1)  # 500-1500 ms: 600-700 busy


class TestExporter:
    def test_idle_memory_is_the_weights_and_in_use_blocks_add_theirs(self):
        """llama3-8b FP16 at TP 2: 8.03 GB of weights per GPU; a 100-block reservation adds
        100 x 16 tokens x 128 KiB / 2 per GPU."""
        config = SimConfig(tensor_parallel_size=2)
        gpus, engine = SimGpus(config, 0), Engine(config)
        assert gpus.memory_used_bytes(engine) == 8.03e9
        engine.free_blocks -= 100
        assert gpus.memory_used_bytes(engine) == 8.03e9 + 100 * 16 * 131072 / 2
        rows = dcgm.gpu_rows(gpus.render(engine, 0))
        assert [(r["gpu"], r["fb_used_mib"]) for r in rows] == [
            ("0", round((8.03e9 + 100 * 16 * 65536) / 2**20)),
            ("1", round((8.03e9 + 100 * 16 * 65536) / 2**20)),
        ]
        assert {r["model"] for r in rows} == {"NVIDIA H100-SXM5-80GB"} and rows[0]["uuid"] != rows[1]["uuid"]

    def test_the_served_counter_is_the_ground_truth(self, sim):
        """/dcgm/metrics parses as an exporter's text; its energy counter (mJ) agrees with the
        exact figure of /sim/gpu read just before and after it."""
        with httpx.Client(base_url=sim.url, timeout=10) as c:
            before = c.get("/sim/gpu").json()
            body = c.get("/dcgm/metrics")
            after = c.get("/sim/gpu").json()
        assert body.headers["content-type"].startswith("text/plain")
        (row,) = dcgm.gpu_rows(body.content)
        assert before["energy_j"] * 1e3 - 1 <= row["energy_mj"] <= after["energy_j"] * 1e3 + 1
        assert row["sm_clock_mhz"] == 1980 and row["fb_used_mib"] + row["fb_free_mib"] == round(80e9 / 2**20)
