"""The CI gate on the committed saved runs: bootstrap intervals, verdicts, outputs, exit codes."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import xmlschema

from loadgen import metric_defs as md
from loadgen.analysis import bootstrap as bs
from loadgen.analysis.compare import metric_value
from loadgen.analysis.gate import GateRules, gate, load_rules
from loadgen.analysis.metrics import summarize
from loadgen.errors import ConfigError
from loadgen.report import gate as gate_report
from loadgen.result import load_records, load_summary

from helpers import cli

ROOT = Path(__file__).parents[2]
RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
RULES = ROOT / "profiles" / "gate.yaml"
XSD = Path(__file__).parents[1] / "junit.xsd"


def rules(*entries: dict, resamples: int = 2000) -> GateRules:
    return GateRules.model_validate({"rules": list(entries), "bootstrap": {"resamples": resamples}})


class TestStatistics:
    @pytest.mark.parametrize("name", ["base-a", "slow-ttft", "with-errors"])
    def test_unweighted_statistic_is_the_summary_value(self, name):
        """Resampling code with every request drawn once reproduces summary.json exactly."""
        s = load_summary(RUNS / name)
        records = load_records(RUNS / name)
        run = bs.RunSamples.from_run(records, s)
        # The fixtures predate the from-schedule metrics: those are summarized here afresh.
        fresh = summarize(records)["metrics"]
        for metric in bs.DISTRIBUTION_METRICS:
            want = s["metrics"][metric] if metric in s["metrics"] else fresh[metric]
            for stat in bs.STATS:
                assert bs.statistic(run, metric, stat) == want[stat]
        for metric in bs.RATE_METRICS:
            if md.present(s, metric):  # items/s: an embeddings or rerank run's only
                assert bs.statistic(run, metric, None) == metric_value(s, metric)

    def test_only_the_asked_metrics_are_built_and_gaps_only_when_asked(self):
        """A gate without an ITL rule never materialises the gaps (16 bytes each: 400 MB for
        100,000 requests x 256 tokens); what it does build is the same as a full build's."""
        s = load_summary(RUNS / "base-a")
        records = load_records(RUNS / "base-a")
        full = bs.RunSamples.from_run(records, s)
        some = bs.RunSamples.from_run(records, s, {"ttft_ms", "tpot_ms"})
        assert set(some.values) == {"ttft_ms", "tpot_ms"}
        assert "itl_ms" in full.values and len(full.values["itl_ms"]) > 0
        for m in ("ttft_ms", "tpot_ms"):
            np.testing.assert_array_equal(some.values[m], full.values[m])
            np.testing.assert_array_equal(some.owners[m], full.owners[m])
        assert all(np.array_equal(some.per_request[k], v) for k, v in full.per_request.items())
        gaps = bs.RunSamples.from_run(records, s, {"itl_ms"})
        np.testing.assert_array_equal(gaps.values["itl_ms"], full.values["itl_ms"])

    def test_a_request_drawn_twice_contributes_all_its_gaps_twice(self):
        run = bs.RunSamples(
            2, 1.0, False, {"itl_ms": np.array([0, 0, 1])}, {"itl_ms": np.array([1.0, 3.0, 10.0])}, {}
        )
        assert bs.statistic(run, "itl_ms", "mean", np.array([2, 0])) == 2.0
        assert bs.statistic(run, "itl_ms", "mean", np.array([1, 1])) == 14 / 3

    def test_closed_loop_rates_scale_with_time_in_flight(self):
        """In a closed loop, drawing the slower of two requests twice stretches the window:
        2 ok requests over 1 s whose latencies are 1 s and 3 s; drawing the 3 s one twice gives
        2 requests over 1 s x 6/4, i.e. 4/3 requests/s; an open loop keeps 2/s."""
        pr = {"ok": np.array([1.0, 1.0]), "busy_s": np.array([1.0, 3.0])}
        closed = bs.RunSamples(2, 1.0, True, {}, {}, pr)
        opened = bs.RunSamples(2, 1.0, False, {}, {}, pr)
        assert bs.statistic(closed, "request_throughput_rps", None) == 2.0
        assert bs.statistic(closed, "request_throughput_rps", None, np.array([0, 2])) == pytest.approx(4 / 3)
        assert bs.statistic(opened, "request_throughput_rps", None, np.array([0, 2])) == 2.0


class TestVerdicts:
    def test_same_distribution_passes(self):
        res = gate(RUNS / "base-b", RUNS / "base-a", RULES)
        assert res.exit_code == 0
        assert [r.status for r in res.results] == ["pass"] * 7

    def test_planted_ttft_regression_fails_with_its_interval(self):
        res = gate(RUNS / "slow-ttft", RUNS / "base-a", RULES)
        assert res.exit_code == 1
        by_rule = {r.rule.text(): r for r in res.results}
        p99 = by_rule["p99 ttft_ms max_regression 15%"]
        assert p99.status == "fail"
        assert p99.baseline == 54.88304574 and p99.candidate == 65.38938313
        assert p99.interval.estimate == pytest.approx(65.38938313 / 54.88304574, rel=1e-12)
        assert 1.15 < p99.interval.low < p99.interval.estimate < p99.interval.high < 1.25
        assert by_rule["p50 ttft_ms max_regression 10%"].status == "fail"
        assert by_rule["p50 tpot_ms max_regression 10%"].status == "pass"
        md = gate_report.markdown(res)
        assert md.startswith("## loadgen gate ❌ regression: slow-ttft vs baseline base-a\n")
        assert "2000 resamples, 95% confidence interval, seed 0" in md
        low, high = p99.interval.low - 1, p99.interval.high - 1
        assert (
            f"| ❌ FAIL | `p99 ttft_ms max_regression 15%` | 54.88 | 65.39 | +19.1% | "
            f"[{low:+.1%}, {high:+.1%}] | ≤ +15.0% | regression |"
        ) in md.splitlines()

    def test_seeded_intervals_are_reproducible_and_independent_of_rule_order(self):
        r1 = {"metric": "ttft_ms", "stat": "p99", "max_regression": "10%"}
        r2 = {"metric": "error_rate", "max": 0.01}
        a = gate(RUNS / "slow-ttft", RUNS / "base-a", rules(r1, r2, resamples=300))
        b = gate(RUNS / "slow-ttft", RUNS / "base-a", rules(r2, r1, resamples=300))
        assert a.results[0].interval == b.results[1].interval

    def test_error_rate_rule_fails_on_with_errors(self):
        res = gate(RUNS / "with-errors", RUNS / "base-a", rules({"metric": "error_rate", "max": 0.01}))
        (r,) = res.results
        assert (res.exit_code, r.status, r.candidate) == (1, "fail", 0.1)
        assert r.interval.low > 0.01

    def test_the_gate_says_how_many_requests_failed_and_why(self):
        """A latency rule alone judges the ok requests: the gate's report says, above its
        table, how many of the candidate's requests failed and of which class."""
        res = gate(
            RUNS / "with-errors",
            RUNS / "base-a",
            rules({"metric": "ttft_ms", "stat": "p99", "max_regression": "50%"}),
        )
        counts = load_summary(RUNS / "with-errors")["counts"]
        why = ", ".join(f"{k} {v}" for k, v in counts["errors_by_class"].items())
        done = counts["ok"] + counts["failed"]
        assert res.failures == (f"candidate: {counts['failed']} of {done} requests failed ({why})",)
        md = gate_report.markdown(res)
        assert (
            f"**Failed requests** (latency figures below are of the ok requests only): {res.failures[0]}"
            in md
        )
        assert gate_report.to_dict(res)["failures"] == list(res.failures)

    def test_a_difference_within_noise_passes_and_says_so(self):
        """slow-ttft's TTFT is 19 % higher; a 19 % allowance puts the bound inside the interval."""
        res = gate(
            RUNS / "slow-ttft",
            RUNS / "base-a",
            rules({"metric": "ttft_ms", "stat": "p99", "max_regression": "19%"}),
        )
        (r,) = res.results
        assert r.status == "pass" and r.within_noise
        assert "within noise" in gate_report.markdown(res)

    def test_throughput_regression_is_lower_not_higher(self):
        res = gate(
            RUNS / "with-errors",
            RUNS / "base-a",
            rules({"metric": "output_tokens_per_s", "max_regression": "5%"}),
        )
        assert res.results[0].rule.limit() == (">=", 0.95)
        assert res.results[0].status == "fail"


class TestComparability:
    def test_different_workload_is_refused_with_the_fields(self):
        res = gate(RUNS / "other-workload", RUNS / "base-a", RULES)
        assert res.exit_code == 2
        assert res.not_comparable == ("lengths.requested.output_tokens.value",)
        assert "- `lengths.requested.output_tokens.value`" in gate_report.markdown(res)

    def test_allow_different_gates_anyway_and_warns(self):
        res = gate(RUNS / "other-workload", RUNS / "base-a", RULES, allow_different=True)
        assert res.exit_code in (0, 1) and res.allowed_differences == (
            "lengths.requested.output_tokens.value",
        )
        assert "> **Warning:** gated with `--allow-different`" in gate_report.markdown(res)


class TestRulesFile:
    def test_shipped_rules(self):
        r = load_rules(RULES)
        assert [x.text() for x in r.rules] == [
            "p50 ttft_ms max_regression 10%",
            "p99 ttft_ms max_regression 15%",
            "p50 tpot_ms max_regression 10%",
            "p99 tpot_ms max_regression 15%",
            "output_tokens_per_s min_ratio 0.95",
            "goodput_rps min_ratio 0.95",
            "error_rate max 0.01",
        ]
        assert (r.bootstrap.resamples, r.bootstrap.confidence, r.bootstrap.seed) == (2000, 0.95, 0)

    @pytest.mark.parametrize(
        "text,problem",
        [
            (
                "rules:\n  - {metric: ttft_ms, stat: p99, max_regresion: 10%}\n",
                "rules[0].max_regresion: unknown key; did you mean 'max_regression'?",
            ),
            ("rules:\n  - {metric: ttft_ms, max: 100}\n", "rules[0].stat: ttft_ms needs a stat"),
            ("rules:\n  - {metric: ttft, stat: p99, max: 1}\n", "rules[0].metric: unknown metric 'ttft'"),
            (
                "rules:\n  - {metric: error_rate, max: 0.01, min: 0}\n",
                "rules[0]: set exactly one bound of max_regression, min_ratio, max_ratio, max, min "
                "(got max, min)",
            ),
            (
                "rules:\n  - {metric: ttft_ms, stat: p99, max_regression: 10}\n",
                "rules[0].max_regression: 10 is ambiguous; write a percentage ('10%') or a fraction (0.1)",
            ),
            ("rules: []\n", "rules: "),
            (
                "rules:\n  - {metric: error_rate, max: 0.01}\nbootstrap: {resamples: 10}\n",
                "bootstrap.resamples: must be >= 100",
            ),
        ],
    )
    def test_errors_name_the_yaml_path(self, tmp_path, text, problem):
        path = tmp_path / "gate.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_rules(path)
        assert str(err.value).startswith(f"{path}: invalid gate rules\n  - ")
        assert any(p.startswith(problem) for p in err.value.problems), err.value.problems


class TestJUnit:
    @pytest.mark.parametrize("candidate", ["slow-ttft", "base-b", "other-workload"])
    def test_validates_against_the_junit_schema(self, candidate):
        res = gate(RUNS / candidate, RUNS / "base-a", RULES)
        xmlschema.XMLSchema(XSD).validate(gate_report.junit_xml(res))

    def test_one_testcase_per_rule_failures_carry_the_interval(self):
        res = gate(RUNS / "slow-ttft", RUNS / "base-a", RULES)
        root = ET.fromstring(gate_report.junit_xml(res))
        suite = root.find("testsuite")
        assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("7", "2", "0")
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == [r.rule.text() for r in res.results]
        failure = cases[1].find("failure")
        assert failure.get("message").startswith("ratio candidate/baseline 1.191, 95% CI [")
        assert cases[2].find("failure") is None


class TestCli:
    @pytest.mark.slow
    def test_exit_codes_and_files(self, tmp_path):
        ok = cli(
            "gate",
            str(RUNS / "base-b"),
            "--baseline",
            str(RUNS / "base-a"),
            "--resamples",
            "500",
            cwd=tmp_path,
        )
        assert ok.returncode == 0, ok.stderr
        assert "## loadgen gate ✅ pass: base-b vs baseline base-a" in ok.stdout
        bad = cli(
            "gate",
            str(RUNS / "slow-ttft"),
            "--baseline",
            str(RUNS / "base-a"),
            "--rules",
            str(RULES),
            "--junit",
            "junit.xml",
            "--markdown",
            "gate.md",
            "--json",
            "gate.json",
            cwd=tmp_path,
        )
        assert bad.returncode == 1, bad.stderr
        assert (tmp_path / "gate.md").read_text() == bad.stdout
        xmlschema.XMLSchema(XSD).validate(str(tmp_path / "junit.xml"))
        assert json.loads((tmp_path / "gate.json").read_text())["verdict"] == "regression"
        refused = cli("gate", str(RUNS / "other-workload"), "--baseline", str(RUNS / "base-a"), cwd=tmp_path)
        assert refused.returncode == 2
        assert "lengths.requested.output_tokens.value" in refused.stdout

    @pytest.mark.slow
    def test_bad_input_exits_2(self, tmp_path):
        old = tmp_path / "old"
        shutil.copytree(RUNS / "base-b", old)
        s = json.loads((old / "summary.json").read_text())
        s["schema_version"] = 0
        (old / "summary.json").write_text(json.dumps(s))
        r = cli("gate", str(old), "--baseline", str(RUNS / "base-a"), cwd=tmp_path)
        assert r.returncode == 2
        assert "schema_version 0 is not supported by this loadgen (it reads version 1)" in r.stderr
        r = cli("compare", str(RUNS / "base-a"), str(old), "-o", "cmp", cwd=tmp_path)
        assert r.returncode == 2 and "schema_version 0 is not supported" in r.stderr
        (tmp_path / "rules.yaml").write_text("rules:\n  - {metric: ttft_ms, stat: p99, max: 1, min: 0}\n")
        r = cli(
            "gate",
            str(RUNS / "base-b"),
            "--baseline",
            str(RUNS / "base-a"),
            "--rules",
            "rules.yaml",
            cwd=tmp_path,
        )
        assert r.returncode == 2 and "rules[0]: set exactly one bound" in r.stderr
        r = cli("gate", str(tmp_path / "nope"), "--baseline", str(RUNS / "base-a"), cwd=tmp_path)
        assert r.returncode == 2 and "not a loadgen run directory" in r.stderr

    @pytest.mark.slow
    def test_compare_writes_and_warns(self, tmp_path):
        r = cli("compare", str(RUNS / "base-a"), str(RUNS / "other-workload"), "-o", "cmp", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("WARNING: the runs' workloads differ")
        assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == [
            "cdf_e2e_ms.png",
            "cdf_itl_ms.png",
            "cdf_tpot_ms.png",
            "cdf_ttft_ms.png",
            "compare.json",
            "compare.md",
        ]


class TestWarningsAsCompareWarns:
    """The gate carries compare's warnings about either run (analysis/run_warnings.py) in its
    markdown, JUnit and JSON, and fails on them only with --strict-conditions."""

    @staticmethod
    def suspect(tmp_path: Path, name: str, **client: object) -> Path:
        run = tmp_path / name
        shutil.copytree(RUNS / "base-a", run)
        summary = json.loads((run / "summary.json").read_text())
        summary["client"].update(client)
        (run / "summary.json").write_text(json.dumps(summary))
        return run

    def test_a_client_limited_baseline_is_said_and_fails_only_when_strict(self, tmp_path):
        baseline = self.suspect(tmp_path, "limited", client_limited=True)
        lenient = gate(RUNS / "base-b", baseline, RULES, resamples=200)
        said = f"{lenient.baseline}: the client limited this run (client.client_limited)"
        assert any(w.startswith(said) for w in lenient.warnings)
        assert (lenient.exit_code, lenient.verdict) == (0, "pass")
        text = gate_report.markdown(lenient)
        assert said in text and "`--strict-conditions` would" in text
        strict = gate(RUNS / "base-b", baseline, RULES, resamples=200, strict_conditions=True)
        assert (strict.exit_code, strict.verdict) == (1, "failed on conditions")
        junit = tmp_path / "junit.xml"
        junit.write_text(gate_report.junit_xml(strict))
        xmlschema.XMLSchema(XSD).validate(str(junit))
        case = next(c for c in ET.parse(junit).iter("testcase") if c.get("name") == "runs' conditions")
        failure = case.find("failure")
        assert failure is not None and said in (failure.get("message") or "")
        saved = gate_report.to_dict(strict)
        assert saved["strict_conditions"] is True and saved["warnings"] == list(strict.warnings)

    def test_a_failed_fidelity_check_is_said_with_the_busy_machine_as_its_cause(self):
        from loadgen.analysis.run_warnings import run_warnings

        busy = "the machine was busy: a runnable task waited for a CPU 56 % of the run"
        suspect = {"client": {"busy_machine": busy}, "fidelity": {"verdict": "fail"}}
        fine = {"client": {}, "fidelity": {"verdict": "pass"}}
        said = run_warnings(["cand", "base"], [suspect, fine], [])
        assert said == [
            "cand: its measurement failed the simulator's ground-truth check (fidelity.verdict): "
            f"its latencies carry the client's own error; {busy}"
        ]

    def test_runs_compare_would_not_warn_about_raise_no_warning(self):
        res = gate(RUNS / "base-b", RUNS / "base-a", RULES, resamples=200, strict_conditions=True)
        assert res.warnings == () and res.exit_code == 0
