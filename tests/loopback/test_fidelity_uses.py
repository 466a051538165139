"""Where the fidelity block is read: the summary schema, the report, compare and the gate.

Two small runs the built-in simulator served (``N`` requests each, under a second), and one the
scripted server served (no ground truth, so no block), each made once for the module. A lag's
value depends on the machine, so nothing here asserts one: bounds are chosen no run can miss
(``max: 1000`` ms) or no run can meet (``max: 0.000001`` ms), and every number shown is compared
with the summary it came from.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

import loadgen
from loadgen.analysis.compare import (
    FIDELITY_ROWS,
    FIDELITY_VERDICT_ROW,
    OPTIONAL_RUN_METRICS,
    TABLE_ROWS,
    metric_value,
)
from loadgen.analysis.fidelity import FIELDS
from loadgen.analysis.gate import GateRules, gate, load_rules
from loadgen.errors import ConfigError
from loadgen.report import compare as compare_report
from loadgen.report import fidelity as fidelity_report
from loadgen.report import gate as gate_report
from loadgen.report import write_report
from loadgen.report.compare import fmt

import helpers
from helpers import run

ROOT = Path(__file__).parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "summary.schema.json").read_text())
N = 12  # requests a run makes, each streaming 8 tokens


def _run(url: str | None, out: Path) -> Path:
    profile = helpers.profile(
        out,
        url,
        **{
            "workload.num_requests": N,
            "load.concurrency": 4,
            "workload.output_tokens": 8,
            "load.warmup_requests": 0,
            "server_metrics.enabled": False,
            "output.dir": str(out),
        },
    )
    return Path(run(profile).run_dir)


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two runs the built-in simulator served, the first with its report: (candidate, baseline)."""
    out = tmp_path_factory.mktemp("sim")
    runs = _run(None, out / "a"), _run(None, out / "b")
    write_report(runs[0])
    return runs


@pytest.fixture(scope="module")
def external_run(tmp_path_factory, server) -> Path:
    """A run the scripted server served, with its report: no ground truth, no fidelity block."""
    r = _run(server.url, tmp_path_factory.mktemp("ext"))
    write_report(r)
    return r


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def without_block(run_dir: Path, dest: Path) -> Path:
    """A copy of ``run_dir`` whose summary lacks the fidelity block, as if another server served."""
    copy = Path(shutil.copytree(run_dir, dest / run_dir.name))
    s = summary(copy)
    del s["fidelity"]
    (copy / "summary.json").write_text(json.dumps(s))
    return copy


def rules(*entries: dict) -> GateRules:
    return GateRules.model_validate({"rules": list(entries), "bootstrap": {"resamples": 100}})


class TestSchema:
    @pytest.mark.slow
    def test_a_simulator_runs_summary_with_its_block_validates(self, sim_runs):
        """The schema documents the block field by field, and a fresh block meets it."""
        s = summary(sim_runs[0])
        assert s["fidelity"]["requests_matched"] == N
        validator = jsonschema.Draft202012Validator(SCHEMA)
        assert [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(s)] == []
        assert SCHEMA["properties"]["fidelity"]["$ref"] == "#/$defs/Fidelity"
        block = SCHEMA["$defs"]["Fidelity"]
        assert set(block["required"]) == set(s["fidelity"])
        assert all(block["properties"][f]["$ref"] == "#/$defs/Distribution" for f in FIELDS)

    @pytest.mark.slow
    def test_a_block_of_another_shape_is_rejected(self, sim_runs):
        s = summary(sim_runs[0])
        s["fidelity"]["verdict"] = "maybe"
        s["fidelity"]["first_token_lag_ms"].pop("p99")
        errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(s))
        assert len(errors) == 2


class TestReport:
    @pytest.mark.slow
    def test_a_simulator_run_has_the_section_with_its_figures(self, sim_runs):
        """After client health: the verdict, the matched count and each distribution's row."""
        s = summary(sim_runs[0])["fidelity"]
        text = (sim_runs[0] / "report.md").read_text()
        heads = [ln for ln in text.splitlines() if ln.startswith("## ")]
        after = [h for h in heads[heads.index("## Client health") + 1 :] if h != "## HTTP phases"]
        assert after[0] == "## Measurement fidelity"  # the client's sections, then fidelity
        section = text.split("## Measurement fidelity")[1].split("\n## ")[0]
        verdict = s["verdict"].upper().replace("_", " ")
        assert f"Fidelity: {verdict}**" in section
        assert f"{s['requests_matched']} requests and {s['chunks_matched']} chunks matched" in section
        assert all(reason in section for reason in s["reasons"])
        d = s["first_token_lag_ms"]
        assert f"| first-token lag | {N} | {d['p50']:,.3f} | {d['p99']:,.3f} | {d['max']:,.3f} |" in section
        assert "| distribution (ms) | n | p50 | p99 | max |" in section
        assert "first_token_lag_ms p99 > 1 ms or chunk_lag_ms p99 > 2 ms" in section
        assert "Measurement fidelity" in (sim_runs[0] / "report.html").read_text()
        assert set(fidelity_report.LABELS) == set(FIELDS)  # every distribution has its row label

    @pytest.mark.slow
    def test_a_run_against_another_server_has_no_section(self, external_run):
        assert "fidelity" not in summary(external_run)
        assert "## Measurement fidelity" not in (external_run / "report.md").read_text()
        assert "Measurement fidelity" not in (external_run / "report.html").read_text()


# compare's rows for chat runs: every row but items/s, which only embeddings and rerank runs have
CHAT_ROWS = [r for r in TABLE_ROWS if r != "items_per_s"]


class TestCompare:
    @pytest.mark.slow
    def test_rows_and_verdict_when_a_run_has_the_block(self, sim_runs, external_run):
        """The fidelity rows follow the usual ones; the external run's cells are empty."""
        cmp = loadgen.compare([sim_runs[0], external_run])
        a, b = cmp.names
        # the simulator's GPU gives its runs energy rows (summary.telemetry), before fidelity's
        assert list(cmp.table.index) == [*CHAT_ROWS, *OPTIONAL_RUN_METRICS, *FIDELITY_ROWS]
        assert list(FIDELITY_ROWS) == [
            "fidelity.first_token_lag_ms p50",
            "fidelity.first_token_lag_ms p99",
            "fidelity.chunk_lag_ms p50",
            "fidelity.chunk_lag_ms p99",
            "fidelity.requests_matched",
        ]
        s = summary(sim_runs[0])
        first = s["fidelity"]["first_token_lag_ms"]
        assert cmp.table.at["fidelity.first_token_lag_ms p99", a] == first["p99"]
        assert cmp.table.at["fidelity.chunk_lag_ms p99", a] == metric_value(s, "fidelity.chunk_lag_ms p99")
        assert cmp.table.at["fidelity.requests_matched", a] == N
        assert cmp.table.loc[list(FIDELITY_ROWS), b].isna().all()
        assert cmp.fidelity_verdicts == {a: s["fidelity"]["verdict"], b: None}
        assert cmp.to_dict()["fidelity_verdict"] == {a: s["fidelity"]["verdict"], b: None}
        lines = compare_report.markdown(cmp).splitlines()
        p99 = fmt(first["p99"])
        assert f"| fidelity.first_token_lag_ms p99 | {p99} | — | — |" in lines
        assert f"| {FIDELITY_VERDICT_ROW} | {s['fidelity']['verdict']} | — | — |" in lines

    @pytest.mark.slow
    def test_no_rows_when_no_run_has_the_block(self, sim_runs, tmp_path):
        """Comparing runs no simulator served gives the table and JSON it always gave."""
        cmp = loadgen.compare([without_block(r, tmp_path / str(i)) for i, r in enumerate(sim_runs)])
        assert list(cmp.table.index) == [*CHAT_ROWS, *OPTIONAL_RUN_METRICS]
        assert cmp.fidelity_verdicts is None and "fidelity_verdict" not in cmp.to_dict()
        assert "fidelity" not in compare_report.markdown(cmp)


class TestGate:
    @pytest.mark.slow
    def test_a_bound_no_run_can_miss_passes(self, sim_runs):
        res = gate(*sim_runs, rules({"metric": "fidelity.first_token_lag_ms", "stat": "p99", "max": 1000}))
        (r,) = res.results
        assert (res.exit_code, r.status, r.interval) == (0, "pass", None)
        assert r.candidate == summary(sim_runs[0])["fidelity"]["first_token_lag_ms"]["p99"]
        assert r.baseline == summary(sim_runs[1])["fidelity"]["first_token_lag_ms"]["p99"]
        assert r.message.endswith("bound <= 1000; not resampled: within the bound")

    @pytest.mark.slow
    def test_a_bound_no_run_can_meet_fails_and_the_outputs_name_the_rule(self, sim_runs):
        res = gate(
            *sim_runs,
            rules(
                {"metric": "fidelity.chunk_lag_ms", "stat": "p99", "max": 0.000001},
                {"metric": "fidelity.first_token_lag_ms", "stat": "count", "min": N},
            ),
        )
        fail, count = res.results
        assert (res.exit_code, res.verdict, fail.status, count.status) == (1, "regression", "fail", "pass")
        assert fail.label == "p99 fidelity.chunk_lag_ms max 1e-06"
        assert "beyond the bound" in fail.message
        md = gate_report.markdown(res)
        assert f"| ❌ FAIL | `p99 fidelity.chunk_lag_ms max 1e-06` | {fmt(fail.baseline)} |" in md
        assert f"- `count fidelity.first_token_lag_ms min {N}`: {count.message}" in md.splitlines()
        cases = ET.fromstring(gate_report.junit_xml(res)).find("testsuite").findall("testcase")
        # a busy host's warning, said as its own passing case, is not a rule's
        cases = [c for c in cases if c.get("name") != "runs' conditions"]
        assert [c.get("name") for c in cases] == [
            "p99 fidelity.chunk_lag_ms max 1e-06",
            f"count fidelity.first_token_lag_ms min {N}",
        ]
        assert cases[0].find("failure").get("message") == fail.message

    @pytest.mark.slow
    def test_a_candidate_without_the_block_is_not_comparable(self, sim_runs, tmp_path):
        """An error (exit 2) saying why, not a regression and not a traceback."""
        candidate = without_block(sim_runs[0], tmp_path)
        rule = {"metric": "fidelity.e2e_error_ms", "stat": "p50", "max": 5}
        res = gate(candidate, sim_runs[1], rules(rule))
        (r,) = res.results
        assert (res.exit_code, res.verdict, r.status, r.candidate) == (2, "not comparable", "error", None)
        assert r.message == "the candidate has no fidelity block: it was not served by the built-in simulator"
        cases = ET.fromstring(gate_report.junit_xml(res)).find("testsuite").findall("testcase")
        # a busy host's or a missing block's warning is its own case ("runs' conditions")
        (case,) = [c for c in cases if c.get("name") != "runs' conditions"]
        assert case.get("name") == "p50 fidelity.e2e_error_ms max 5"
        assert case.find("error").get("message") == r.message

    @pytest.mark.parametrize(
        "rule,problem",
        [
            (
                "{metric: fidelity.first_token_lag_ms, stat: p99, max_regression: 10%}",
                "rules[0].max_regression: p99 fidelity.first_token_lag_ms takes an absolute bound on "
                "the candidate (max or min)",
            ),
            ("{metric: fidelity.chunk_lag_ms, stat: p99, min_ratio: 0.9}", "rules[0].min_ratio: "),
            ("{metric: fidelity.lag, stat: p99, max: 1}", "rules[0].metric: unknown fidelity distribution"),
            ("{metric: fidelity.chunk_lag_ms, max: 1}", "rules[0].stat: fidelity.chunk_lag_ms needs a stat"),
            ("{metric: fidelity.chunk_lag_ms, stat: p99, max: 1, stage: 0}", "rules[0].stage: "),
        ],
    )
    def test_rules_the_gate_cannot_judge_are_refused(self, tmp_path, rule, problem):
        path = tmp_path / "gate.yaml"
        path.write_text(f"rules:\n  - {rule}\n")
        with pytest.raises(ConfigError) as err:
            load_rules(path)
        assert any(p.startswith(problem) for p in err.value.problems), err.value.problems

    def test_every_distribution_and_stat_is_accepted(self):
        from loadgen.metric_defs import STATS

        accepted = rules(*({"metric": f"fidelity.{f}", "stat": s, "max": 1} for f in FIELDS for s in STATS))
        assert len(accepted.rules) == len(FIELDS) * len(STATS)
