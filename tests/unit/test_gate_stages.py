"""The gate per stage of a multi-stage run, and on capacity_rps, on synthetic runs (stage_runs.py)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from stage_runs import Stage, make_run

from loadgen.analysis import bootstrap as bs
from loadgen.analysis import gate_stages as gs
from loadgen.analysis.compare import metric_value
from loadgen.analysis.gate import GateRules, gate, load_rules
from loadgen.errors import ConfigError
from loadgen.report import gate as gate_report
from loadgen.result import load_records, load_summary

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
XSD = Path(__file__).parents[1] / "junit.xsd"
# Only stage 1 (c=2) regressed: its TTFT went from 25 to 40 ms, still below stage 2's 60 ms, so
# the pooled p99 (stage 2's tail) does not move while the pooled p50 (stage 1's) does.
BASE = [Stage(1, 40, 20, 5), Stage(2, 40, 25, 6), Stage(4, 40, 60, 8)]
CAND = [Stage(1, 40, 20, 5), Stage(2, 40, 40, 6), Stage(4, 40, 60, 8)]


def rules(*entries: dict, resamples: int = 500) -> GateRules:
    return GateRules.model_validate({"rules": list(entries), "bootstrap": {"resamples": resamples}})


def ttft(stat: str, bound: str, **kw: object) -> dict:
    return {"metric": "ttft_ms", "stat": stat, "max_regression": bound, **kw}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate-stages")
    return {"base": make_run(root / "base", BASE), "cand": make_run(root / "cand", CAND)}


def capacity_run(root: Path, name: str, rps: float | None, ci: list[float] | None = None) -> Path:
    """A run whose summary.capacity is ``rps`` with ``ci`` (none: [null, null], as written when
    the search gave no bound), the block's other fields as ``loadgen capacity`` writes them."""
    block = None
    if rps is not None:
        block = {
            "capacity_rps": rps,
            "ci95": ci or [None, None],
            "attainment": 0.99,
            "slos": {"ttft_ms": 100.0},
            "goodput_rps": rps,
            "output_tokens_per_s": None,
            "usd_per_million_output_tokens": None,
            "stages": [],
            "stopped_because": None,
            "method": "bisection",
        }
    return make_run(root / name, BASE[:2], capacity=block)


class TestStageRules:
    def test_stage_statistic_is_that_stages_summary_value(self, runs):
        s, records = load_summary(runs["base"]), load_records(runs["base"])
        for st in s["stages"]:
            run = bs.RunSamples.from_run(
                [r for r in records if r.stage == st["index"]], gs.stage_summary(s, st["index"])
            )
            assert run.n == 40 and run.closed_loop
            assert bs.statistic(run, "ttft_ms", "p99") == st["metrics"]["ttft_ms"]["p99"]
            for metric in ("output_tokens_per_s", "goodput_rps", "error_rate"):
                assert bs.statistic(run, metric, None) == metric_value(st, metric)

    def test_only_the_stage_rule_catches_a_one_stage_regression(self, runs):
        res = gate(
            runs["cand"],
            runs["base"],
            rules(
                ttft("p99", "15%"),  # pooled tail: stage 2's, unchanged
                ttft("p50", "15%"),  # pooled median: stage 1's, moved
                ttft("p99", "15%", stage=0),
                ttft("p99", "15%", stage=1),
                ttft("p99", "15%", stage="c=2"),
                ttft("p99", "15%", stage=2),
            ),
        )
        assert [r.status for r in res.results] == ["pass", "fail", "pass", "fail", "fail", "pass"]
        assert res.exit_code == 1
        stage1 = res.results[3]
        assert stage1.stage == (1, "c=2") and res.results[4].stage == (1, "c=2")
        assert stage1.interval.low > 1.15
        base_p99 = load_summary(runs["base"])["stages"][1]["metrics"]["ttft_ms"]["p99"]
        cand_p99 = load_summary(runs["cand"])["stages"][1]["metrics"]["ttft_ms"]["p99"]
        assert (stage1.baseline, stage1.candidate) == (base_p99, cand_p99)
        assert stage1.interval.estimate == pytest.approx(cand_p99 / base_p99)
        whole = res.results[0]
        assert whole.stage is None and whole.candidate == pytest.approx(whole.baseline)

    def test_rendering_names_the_stage(self, runs):
        res = gate(runs["cand"], runs["base"], rules(ttft("p99", "15%", stage="c=2"), ttft("p99", "15%")))
        assert res.results[0].rule.text() == "p99 ttft_ms max_regression 15% at stage 'c=2'"
        assert res.results[0].label == "p99 ttft_ms max_regression 15% at stage 1 (c=2)"
        md = gate_report.markdown(res)
        assert "| ❌ FAIL | `p99 ttft_ms max_regression 15% at stage 1 (c=2)` |" in md
        assert "| ✅ pass | `p99 ttft_ms max_regression 15%` |" in md
        assert "A rule with a stage resamples that stage's requests only" in md
        xml = gate_report.junit_xml(res)
        xmlschema.XMLSchema(XSD).validate(xml)
        names = [c.get("name") for c in ET.fromstring(xml).iter("testcase")]
        assert names == ["p99 ttft_ms max_regression 15% at stage 1 (c=2)", "p99 ttft_ms max_regression 15%"]
        data = gate_report.to_dict(res)["rules"]
        assert data[0]["stage"] == {"index": 1, "name": "c=2"} and data[1]["stage"] is None
        assert data[0]["rule"] == "p99 ttft_ms max_regression 15% at stage 'c=2'"

    def test_an_unknown_stage_is_a_config_error_naming_the_rule(self, runs):
        with pytest.raises(ConfigError) as err:
            gate(runs["cand"], runs["base"], rules(ttft("p99", "15%"), ttft("p99", "15%", stage="c=3")))
        (problem,) = err.value.problems
        assert problem.startswith("rules[1].stage (p99 ttft_ms max_regression 15% at stage 'c=3'): ")
        assert "no stage with name 'c=3' in the candidate run" in problem
        assert "its stages are 0 ('c=1'), 1 ('c=2'), 2 ('c=4')" in problem
        with pytest.raises(ConfigError, match=r"rules\[0\].stage .*no stage with index 7"):
            gate(runs["cand"], runs["base"], rules(ttft("p99", "15%", stage=7)))

    def test_a_stage_rule_on_a_single_stage_run(self, runs):
        with pytest.raises(ConfigError) as err:
            gate(RUNS / "base-b", RUNS / "base-a", rules(ttft("p99", "15%", stage=0)))
        assert "the candidate run is single-stage" in err.value.problems[0]
        assert "drop `stage:` from this rule" in err.value.problems[0]

    @pytest.mark.parametrize(
        "rule,problem",
        [
            ("{metric: ttft_ms, stat: p99, max: 1, stage: true}", "rules[0].stage: expected a stage index"),
            ("{metric: ttft_ms, stat: p99, max: 1, stage: -1}", "rules[0].stage: -1 is not a stage index"),
            ("{metric: ttft_ms, stat: p99, max: 1, stage: ''}", "rules[0].stage: an empty name"),
            (
                "{metric: capacity_rps, min_ratio: 0.9, stage: 1}",
                "rules[0].stage: capacity_rps is the whole run's capacity (summary.capacity); drop stage",
            ),
            (
                "{metric: capacity_rps, stat: p99, min: 1}",
                "rules[0].stat: capacity_rps is a run-level number",
            ),
            ("{metric: capacity_rps}", "rules[0]: set exactly one bound"),
        ],
    )
    def test_rules_file_errors_name_the_field(self, tmp_path, rule, problem):
        path = tmp_path / "gate.yaml"
        path.write_text(f"rules:\n  - {rule}\n")
        with pytest.raises(ConfigError) as err:
            load_rules(path)
        assert str(err.value).startswith(f"{path}: invalid gate rules\n  - ")
        assert any(p.startswith(problem) for p in err.value.problems), err.value.problems

    def test_stage_by_name_or_index_in_yaml(self, tmp_path):
        path = tmp_path / "gate.yaml"
        path.write_text(
            "rules:\n  - {metric: ttft_ms, stat: p99, max: 1, stage: 2}\n"
            '  - {metric: ttft_ms, stat: p99, max: 1, stage: "c=8"}\n'
        )
        assert [r.stage for r in load_rules(path).rules] == [2, "c=8"]


@pytest.fixture(scope="module")
def cap(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("capacity")
    return {
        "base": capacity_run(root, "base", 10.0, [9.5, 10.5]),
        "same": capacity_run(root, "same", 10.2, [9.8, 10.6]),
        "noisy": capacity_run(root, "noisy", 9.0, [8.6, 9.4]),
        "worse": capacity_run(root, "worse", 8.0, [7.6, 8.4]),
        "no-ci": capacity_run(root, "no-ci", 9.0),
        "none": capacity_run(root, "none", None),
    }


class TestCapacityRules:
    def test_ratio_against_both_intervals(self, cap):
        rule = {"metric": "capacity_rps", "min_ratio": 0.95}
        ok = gate(cap["same"], cap["base"], rules(rule)).results[0]
        assert (ok.status, ok.within_noise, ok.baseline, ok.candidate) == ("pass", False, 10.0, 10.2)
        noisy = gate(cap["noisy"], cap["base"], rules(rule)).results[0]
        assert noisy.status == "pass" and noisy.within_noise  # 0.9, but [8.6/10.5, 9.4/9.5] reaches 0.95
        assert (noisy.interval.low, noisy.interval.high) == (
            pytest.approx(8.6 / 10.5),
            pytest.approx(9.4 / 9.5),
        )
        res = gate(cap["worse"], cap["base"], rules(rule))
        worse = res.results[0]
        assert (res.exit_code, worse.status) == (1, "fail")
        assert worse.interval.high == pytest.approx(8.4 / 9.5) and worse.interval.high < 0.95
        assert worse.message.startswith(
            "summary.capacity.capacity_rps, candidate 8 req/s (95% CI [7.6, 8.4]) over baseline "
            "10 req/s (95% CI [9.5, 10.5]); no bootstrap"
        )
        assert worse.message.endswith("the whole interval is beyond the bound")

    def test_max_regression_is_lower_capacity(self, cap):
        r = gate(
            cap["worse"], cap["base"], rules({"metric": "capacity_rps", "max_regression": "10%"})
        ).results[0]
        assert r.rule.limit() == (">=", 0.9) and r.status == "fail"

    def test_without_both_intervals_the_point_values(self, cap):
        r = gate(cap["no-ci"], cap["base"], rules({"metric": "capacity_rps", "min_ratio": 0.95})).results[0]
        assert (r.status, r.interval) == ("fail", None)
        assert "point values compared" in r.message
        md = gate_report.markdown(
            gate(cap["no-ci"], cap["base"], rules({"metric": "capacity_rps", "min_ratio": 0.95}))
        )
        assert "| ❌ FAIL | `capacity_rps min_ratio 0.95` | 10 | 9 | -10.0% | — | ≥ -5.0% |" in md
        assert (
            "- `capacity_rps min_ratio 0.95`: summary.capacity.capacity_rps, candidate 9 req/s (no ci95)"
            in md
        )

    def test_absolute_bound_on_the_candidates_interval(self, cap):
        low = gate(cap["worse"], cap["base"], rules({"metric": "capacity_rps", "min": 9})).results[0]
        assert low.status == "fail" and low.interval.high == 8.4
        edge = gate(cap["worse"], cap["base"], rules({"metric": "capacity_rps", "min": 8.2})).results[0]
        assert edge.status == "pass" and edge.within_noise

    def test_missing_capacity(self, cap):
        rule = {"metric": "capacity_rps", "min_ratio": 0.95}
        res = gate(cap["same"], cap["none"], rules(rule))
        assert (res.exit_code, res.results[0].status) == (2, "error")
        assert "the baseline has no summary.capacity.capacity_rps" in res.results[0].message
        res = gate(cap["none"], cap["base"], rules(rule))
        assert (res.exit_code, res.results[0].status) == (1, "fail")
        assert "the candidate has no summary.capacity.capacity_rps" in res.results[0].message

    def test_json_and_junit(self, cap):
        res = gate(cap["worse"], cap["base"], rules({"metric": "capacity_rps", "min_ratio": 0.95}))
        xmlschema.XMLSchema(XSD).validate(gate_report.junit_xml(res))
        d = gate_report.to_dict(res)["rules"][0]
        assert (d["metric"], d["stage"], d["candidate"], d["baseline"]) == ("capacity_rps", None, 8.0, 10.0)
        assert json.dumps(d)  # serialisable


def test_an_incomplete_run_is_not_gated(tmp_path):
    """A run stopped before its limits describes a shorter run than asked for: the gate refuses
    it (exit 2 through the CLI) instead of judging it."""
    import json
    import shutil

    from loadgen import gate
    from loadgen.errors import ResultError

    runs = Path(__file__).parents[1] / "fixtures" / "runs"
    cand = Path(shutil.copytree(runs / "base-b", tmp_path / "cand"))
    summary = json.loads((cand / "summary.json").read_text())
    summary.update(complete=False, incomplete_reason="stopped before its limits (Ctrl-C or SIGTERM)")
    (cand / "summary.json").write_text(json.dumps(summary))
    rules = Path(__file__).parents[2] / "profiles" / "gate.yaml"
    with pytest.raises(ResultError, match=r"candidate run .* is incomplete \(stopped before its limits"):
        gate(cand, runs / "base-a", rules)
