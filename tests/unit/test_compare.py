"""Compare: golden tables, condition diffs and warnings on the committed saved runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import loadgen
from loadgen.analysis.compare import TABLE_ROWS, condition_diff, flatten_conditions, metric_value
from loadgen.errors import ResultError
from loadgen.report import compare as compare_report

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"


def summary(name: str) -> dict:
    return json.loads((RUNS / name / "summary.json").read_text())


class TestTable:
    def test_side_by_side_values_are_the_summaries(self):
        """Every cell is the number in that run's summary.json, every relative cell (v - v0) / v0."""
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "slow-ttft"])
        a, s = summary("base-a"), summary("slow-ttft")
        assert cmp.names == ("base-a", "slow-ttft")
        # every row of the table but items/s, which only embeddings and rerank runs have
        rows = [r for r in TABLE_ROWS if r != "items_per_s"]
        assert list(cmp.table.index) == rows
        for row in rows:
            assert cmp.table.at[row, "base-a"] == metric_value(a, row)
            assert cmp.table.at[row, "slow-ttft"] == metric_value(s, row)
        assert cmp.table.at["ttft_ms p99", "base-a"] == 54.88304574
        assert cmp.table.at["ttft_ms p99", "slow-ttft"] == 65.38938313
        assert cmp.relative.at["ttft_ms p99", "slow-ttft"] == (65.38938313 - 54.88304574) / 54.88304574
        assert cmp.table.at["output_tokens_per_s", "slow-ttft"] == 653.6955478219388
        assert cmp.table.at["goodput_rps", "base-a"] == 28.18545062853016

    def test_markdown_rows(self):
        """The Markdown table shows 4 significant digits and the signed relative difference."""
        md = compare_report.markdown(loadgen.compare([RUNS / "base-a", RUNS / "slow-ttft"]))
        lines = md.splitlines()
        assert "| metric | base-a | slow-ttft | slow-ttft vs base-a |" in lines
        assert "| ttft_ms p50 | 52.76 | 62.77 | +19.0% |" in lines
        assert "| ttft_ms p99 | 54.88 | 65.39 | +19.1% |" in lines
        assert "| output_tokens_per_s | 676.5 | 653.7 | -3.4% |" in lines
        assert "| error_rate | 0 | 0 | — |" in lines  # relative to zero is undefined

    def test_three_runs_relative_to_the_first(self):
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "base-b", RUNS / "slow-ttft"])
        assert list(cmp.frame().columns) == [
            "base-a",
            "base-b",
            "slow-ttft",
            "base-b vs base-a",
            "slow-ttft vs base-a",
        ]


class TestConditionDiff:
    def test_other_workload_lists_exactly_the_differing_fields(self):
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "other-workload"])
        assert cmp.differing_fields == [
            "labels.gpu",
            "labels.precision",
            "lengths.realised.sampled.output_tokens",
            "lengths.realised.server_output_tokens",
            "lengths.requested.output_tokens.value",
            "target.url",
        ]
        by_field = {d.field: d.values for d in cmp.conditions}
        assert by_field["labels.gpu"] == ("H100", "H200")
        assert by_field["lengths.requested.output_tokens.value"] == (24, 48)

    def test_same_distribution_runs_differ_only_in_the_server_address(self):
        """base-a and base-b ran the same profile against two test servers on random ports."""
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "base-b"])
        assert cmp.differing_fields == ["target.url"]
        assert cmp.warnings == ()

    def test_with_errors_lists_run_length_and_fault_injection(self):
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "with-errors"])
        assert cmp.differing_fields == [
            "profile.target.extra_body.loadgen_test.fail",
            "profile.target.extra_body.loadgen_test.fail_every",
            "profile.workload.num_requests",
            "target.url",
        ]

    def test_ignored_shadowed_and_nested(self):
        """Run name and output dir are ignored, profile.* duplicates are listed once, nested
        dicts flatten to dotted paths, an absent field differs from a present one."""
        a = {
            "profile": {
                "name": "x",
                "output": {"dir": "a"},
                "load": {"rate": 1},
                "workload": {"num_requests": 10},
            },
            "load": {"rate": 1},
            "labels": {},
        }
        b = {
            "profile": {
                "name": "y",
                "output": {"dir": "b"},
                "load": {"rate": 2},
                "workload": {"num_requests": 10},
            },
            "load": {"rate": 2},
            "labels": {"gpu": "H200"},
        }
        assert [(d.field, d.values) for d in condition_diff([a, b])] == [
            ("labels.gpu", ("(absent)", "H200")),
            ("load.rate", (1, 2)),
        ]
        assert flatten_conditions(a) == {"profile.workload.num_requests": 10, "load.rate": 1}

    def test_a_field_an_older_run_never_wrote_is_the_same_when_null(self):
        """A profile field a newer loadgen added at its null default (workload.images) does not
        set its run apart from an older one that lacks it; set, it does."""
        old = {"profile": {"workload": {"seed": 0}}}
        new = {"profile": {"workload": {"seed": 0, "images": None}}}
        used = {"profile": {"workload": {"seed": 0, "images": {"count": 1}}}}
        assert condition_diff([old, new]) == []
        assert [d.field for d in condition_diff([old, used])] == ["profile.workload.images.count"]


class TestWarnings:
    def test_workload_difference_is_warned_at_the_top(self, tmp_path):
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "other-workload"])
        assert cmp.warnings == (
            "the runs' workloads differ (lengths.realised.sampled.output_tokens, "
            "lengths.realised.server_output_tokens, lengths.requested.output_tokens.value): "
            "their latencies and throughputs are not like-for-like",
        )
        md = compare_report.markdown(cmp)
        assert md.splitlines()[2].startswith("> **Warning:** the runs' workloads differ")


class TestOutputs:
    def test_writes_markdown_json_and_cdf_plots(self, tmp_path):
        cmp = loadgen.compare([RUNS / "base-a", RUNS / "slow-ttft"])
        written = compare_report.write(cmp, tmp_path / "cmp")
        names = sorted(p.name for p in written)
        assert names == [
            "cdf_e2e_ms.png",
            "cdf_itl_ms.png",
            "cdf_tpot_ms.png",
            "cdf_ttft_ms.png",
            "compare.json",
            "compare.md",
        ]
        for p in written:
            if p.suffix == ".png":
                assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
        assert data["metrics"]["ttft_ms p99"] == {"base-a": 54.88304574, "slow-ttft": 65.38938313}
        assert data["condition_diff"] == [
            {"field": "target.url", "values": ["http://127.0.0.1:36021", "http://127.0.0.1:33213"]}
        ]

    def test_cdf_figures_overlay_one_line_per_run(self):
        figs = compare_report.cdf_figures(loadgen.compare([RUNS / "base-a", RUNS / "with-errors"]))
        labels = [line.get_label() for line in figs["ttft_ms"].axes[0].get_lines()]
        assert labels == ["base-a (n=120)", "with-errors (n=90)"]
        assert [ln.get_label() for ln in figs["itl_ms"].axes[0].get_lines()] == [
            "base-a (n=2760)",
            "with-errors (n=2070)",
        ]


class TestBadInput:
    def test_old_schema_version_fails_clearly(self, tmp_path):
        run = tmp_path / "old"
        shutil.copytree(RUNS / "base-b", run)
        s = json.loads((run / "summary.json").read_text())
        s["schema_version"] = 0
        (run / "summary.json").write_text(json.dumps(s))
        with pytest.raises(ResultError, match="schema_version 0 is not supported"):
            loadgen.compare([RUNS / "base-a", run])

    def test_needs_two_runs(self):
        with pytest.raises(ValueError, match="at least two runs"):
            loadgen.compare([RUNS / "base-a"])


def test_runs_against_one_url_have_no_replica_rows_and_a_missing_slot_is_empty():
    """Replica rows appear only when some run has the block; a run with fewer replicas than
    the other has empty cells in the slots it lacks, never another slot's figure."""
    from loadgen.analysis.compare_replicas import replica_rows, replica_value

    cmp = loadgen.compare([RUNS / "base-a", RUNS / "base-b"])
    assert not [r for r in cmp.table.index if r.startswith("replica.")]
    one = {"replicas": {"by_replica": [{"share": 1.0, "failed": 2, "tpot_ms": {"p50": 9.5, "p99": None}}]}}
    assert replica_rows([summary("base-a"), one])[:3] == (
        "replica.0.share",
        "replica.0.failed",
        "replica.0.output_tokens_per_s",
    )
    assert len(replica_rows([one])) == 3 + 3 * 2
    assert replica_value(one, "replica.0.failed") == 2.0
    assert replica_value(one, "replica.0.tpot_ms p50") == 9.5
    assert replica_value(one, "replica.0.tpot_ms p99") is None
    assert replica_value(one, "replica.1.tpot_ms p50") is None
    assert replica_value(summary("base-a"), "replica.0.share") is None
