"""Compare of multi-stage runs: overlaid load curves, capacity at the SLA, labels from conditions.

The runs are synthetic (tests/stage_runs.py): literal records summarized by the run's own code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stage_runs import Stage, make_run

import loadgen
from loadgen.analysis.compare_curves import CAPACITY_SEARCHED, HIGHEST_PASSING_STAGE, NO_CAPACITY
from loadgen.report import compare as compare_report
from loadgen.report import compare_curves

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
# SLA: p99 TTFT < 100 ms, p99 TPOT < 20 ms. "fast" passes up to c=4, "slow" up to c=2.
FAST = [Stage(1, 24, 20, 5), Stage(2, 24, 25, 6), Stage(4, 24, 40, 8), Stage(8, 24, 150, 12)]
SLOW = [Stage(1, 24, 30, 6), Stage(2, 24, 45, 8), Stage(4, 24, 120, 12), Stage(8, 24, 300, 18)]
SEARCHED = {
    "capacity_rps": 3.2,
    "ci95": [3.0, 3.4],
    "attainment": 0.99,
    "slos": {"ttft_ms": 100.0},
    "goodput_rps": 3.1,
    "output_tokens_per_s": None,
    "usd_per_million_output_tokens": None,
    "stages": [],
    "stopped_because": "bracket narrower than 5%",
    "method": "bisection on attainment",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stage-runs")
    return {
        "fast": make_run(root / "fast", FAST, labels={"engine": "fast", "team": "a"}),
        "slow": make_run(root / "slow", SLOW, labels={"engine": "slow", "team": "a"}),
        "searched": make_run(
            root / "searched", SLOW, labels={"engine": "searched", "team": "a"}, capacity=SEARCHED
        ),
        "a100": make_run(root / "a100", SLOW, preset="llama3-8b-fp16@a100"),
        "h100": make_run(root / "h100", FAST, preset="llama3-8b-fp16@h100"),
    }


def summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


class TestCurves:
    def test_overlay_pngs_and_json(self, runs, tmp_path):
        cmp = loadgen.compare([runs["fast"], runs["slow"]])
        written = compare_report.write(cmp, tmp_path / "cmp")
        pngs = sorted(p.name for p in written if p.name.startswith("curve_"))
        assert pngs == [
            "curve_e2e_ms_p99.png",
            "curve_output_tokens_per_s.png",
            "curve_tpot_ms_p99.png",
            "curve_ttft_ms_p99.png",
        ]
        for name in pngs:
            assert (tmp_path / "cmp" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        md = (tmp_path / "cmp" / "compare.md").read_text()
        assert all(f"]({name})" in md for name in pngs)
        data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
        assert data["curves"]["label_source"] == "labels.engine"
        assert [r["label"] for r in data["curves"]["runs"]] == ["engine=fast", "engine=slow"]
        assert data["curves"]["runs"][0]["points"] == summary(runs["fast"])["curve"]["points"]
        assert [c["value"] for c in data["curves"]["capacity"]] == [4, 2]

    def test_one_curve_per_run_with_sla_line_and_knee(self, runs):
        cmp = loadgen.compare([runs["fast"], runs["slow"]])
        fig = compare_curves.curve_figures(cmp.curves)["ttft_ms_p99"]
        ax = fig.axes[0]
        labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert labels[:1] == ["engine=fast"] and "engine=slow" in labels
        assert "SLA p99 ttft_ms < 100" in labels
        sla = next(ln for ln in ax.get_lines() if ln.get_label() == "SLA p99 ttft_ms < 100")
        assert list(sla.get_ydata()) == [100, 100]
        fast = next(ln for ln in ax.get_lines() if ln.get_label() == "engine=fast")
        points = summary(runs["fast"])["curve"]["points"]
        assert list(fast.get_xdata()) == [p["throughput_rps"] for p in points]
        assert list(fast.get_ydata()) == [p["ttft_ms"]["p99"] for p in points]
        for name in ("fast", "slow"):  # each run's knee is starred at its knee stage
            knee = summary(runs[name])["curve"]["knee"]
            assert knee is not None
            star = next(
                ln for ln in ax.get_lines() if ln.get_label() == f"knee engine={name}: {knee['name']}"
            )
            assert star.get_marker() == "*"
            assert list(star.get_xdata()) == [knee["throughput_rps"]]

    def test_tokens_against_offered_load(self, runs):
        cmp = loadgen.compare([runs["fast"], runs["slow"]])
        ax = compare_curves.curve_figures(cmp.curves)["output_tokens_per_s"].axes[0]
        assert ax.get_xlabel() == "offered load (concurrency)"
        slow = next(ln for ln in ax.get_lines() if ln.get_label() == "engine=slow")
        assert list(slow.get_xdata()) == [1, 2, 4, 8]


class TestCapacityTable:
    def test_rows_in_run_order_with_their_values(self, runs):
        cmp = loadgen.compare([runs["fast"], runs["slow"], runs["searched"]])
        caps = [r.capacity for r in cmp.curves.runs]
        assert [c.basis for c in caps] == [HIGHEST_PASSING_STAGE, HIGHEST_PASSING_STAGE, CAPACITY_SEARCHED]
        assert [c.value for c in caps] == [4, 2, 3.2]
        md = compare_report.markdown(cmp).splitlines()
        head = md.index("## Capacity at the SLA")
        assert (
            md.index("## Conditions that differ")
            > head
            > md.index("## Metrics (relative difference to fast)")
        )
        rows = md[head + 2 : head + 6]
        assert rows[0] == "| run | label | capacity at the SLA | 95% CI | throughput there (req/s) | knee |"
        tput = {
            n: {p["stage"]: p["throughput_rps"] for p in summary(runs[n])["curve"]["points"]} for n in runs
        }
        knee = {n: summary(runs[n])["curve"]["knee"] for n in runs}

        def knee_cell(n: str) -> str:
            return f"{knee[n]['name']} at {compare_curves.num(knee[n]['throughput_rps'])} req/s"

        assert rows[2] == (
            f"| fast | engine=fast | c=4 offered (highest stage passing the SLA) | — | "
            f"{compare_curves.num(tput['fast'][2])} | {knee_cell('fast')} |"
        )
        assert rows[3].startswith("| slow | engine=slow | c=2 offered (highest stage passing the SLA) | — | ")
        searched = md[head + 6]
        assert searched == (
            "| searched | engine=searched | 3.2 req/s (capacity search) | [3, 3.4] req/s | 3.2 | "
            f"{knee_cell('searched')} |"
        )
        assert "Runs are labelled by `labels.engine`." in md[head + 8]

    def test_no_stage_passing_and_top_of_sweep(self, runs, tmp_path):
        failing = make_run(
            tmp_path / "failing", [Stage(1, 24, 500, 5), Stage(2, 24, 600, 5)], labels={"engine": "x"}
        )
        passing = make_run(
            tmp_path / "passing", [Stage(1, 24, 10, 5), Stage(2, 24, 12, 5)], labels={"engine": "y"}
        )
        cmp = loadgen.compare([failing, passing])
        no, top = (r.capacity for r in cmp.curves.runs)
        assert (no.basis, no.value, no.detail) == (NO_CAPACITY, None, "no stage met the SLA")
        assert top.at_top and top.value == 2
        md = compare_report.markdown(cmp)
        assert "| failing | engine=x | none (no stage met the SLA) | — |" in md
        assert (
            "| passing | engine=y | ≥ c=2 offered (highest stage passing the SLA; the sweep's highest" in md
        )


class TestLabels:
    def test_from_the_differing_label_only(self, runs):
        """team=a is the same in both runs: only engine names them."""
        cmp = loadgen.compare([runs["slow"], runs["fast"]])
        assert cmp.curves.label_source == "labels.engine"
        assert [r.label for r in cmp.curves.runs] == ["engine=slow", "engine=fast"]

    def test_from_the_sim_preset_when_no_label_differs(self, runs):
        cmp = loadgen.compare([runs["h100"], runs["a100"]])
        assert cmp.curves.label_source == "target.builtin_simulator.config.preset"
        assert [r.label for r in cmp.curves.runs] == ["llama3-8b-fp16@h100", "llama3-8b-fp16@a100"]

    def test_run_name_when_only_the_simulators_port_differs(self, runs, tmp_path):
        other = make_run(tmp_path / "again", FAST, preset="llama3-8b-fp16@h100")
        cmp = loadgen.compare([runs["h100"], other])
        assert cmp.curves.label_source == "run name"
        assert [r.label for r in cmp.curves.runs] == ["h100", "again"]


class TestSingleStage:
    def test_single_stage_comparison_has_no_curves(self, tmp_path):
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "slow-ttft"])
        assert cmp.curves is None
        assert "curves" not in cmp.to_dict()
        assert "## Capacity at the SLA" not in compare_report.markdown(cmp)

    def test_a_single_stage_run_among_staged_ones_is_one_point(self, runs):
        cmp = loadgen.compare([runs["fast"], RUNS / "base-a"])
        one = cmp.curves.runs[1]
        assert not one.multi_stage and len(one.points) == 1
        assert (
            one.points[0]["throughput_rps"] == summary(RUNS / "base-a")["metrics"]["request_throughput_rps"]
        )
