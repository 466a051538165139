"""Every consumer of the metric registry (loadgen/metric_defs/) agrees with it.

The profile's SLA rules, the SLA evaluation, the summary, the bootstrap and the gate's rules,
compare's table and plots, and the console's and the report's tables each take their metric
lists from the registry; these tests pin that each accepts, computes or shows exactly the
metrics the registry says, on a summary of three tiny literal records.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

import loadgen
from loadgen import metric_defs as md
from loadgen.analysis import bootstrap as bs
from loadgen.analysis import fidelity
from loadgen.analysis import sla as sla_mod
from loadgen.analysis.client_means import COMPARED, client_means
from loadgen.analysis.compare import LATENCIES, TABLE_COUNTS, TABLE_ROWS, metric_value
from loadgen.analysis.curve import CURVE_METRICS
from loadgen.analysis.gate import GATE_FIELDS, GateRule
from loadgen.analysis.metrics import (
    DERIVED_COLUMNS,
    derived_columns,
    distribution,
    distribution_samples,
    summarize,
)
from loadgen.cli.console import summary_table
from loadgen.config import SlaConfig, SlaRule, load_profile
from loadgen.config.sla import ParsedRule, parse_rule
from loadgen.records import RequestRecord
from loadgen.report import compare as compare_report
from loadgen.report.curve import LATENCIES as CURVE_LATENCIES
from loadgen.report.sections import latency_section, latency_table, sla_section, throughput_section
from loadgen.report.server import MEAN_ROWS

MS = 1_000_000
RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
RECORDS = [
    # ok: first byte at 20 ms, chunks at 30/40/50 ms carrying 1, 1, 3 tokens, end at 55 ms
    RequestRecord(
        id=0,
        warmup=False,
        t_sched_ns=0,
        t_send_ns=1 * MS,
        requested_output_tokens=5,
        requested_prompt_tokens=10,
        ok=True,
        t_first_byte_ns=20 * MS,
        t_first_token_ns=30 * MS,
        t_end_ns=55 * MS,
        chunk_times_ns=[30 * MS, 40 * MS, 50 * MS],
        chunk_tokens=[1, 1, 3],
        prompt_tokens=10,
        output_tokens=5,
    ),
    RequestRecord(
        id=1,
        warmup=False,
        t_sched_ns=10 * MS,
        t_send_ns=12 * MS,
        requested_output_tokens=5,
        requested_prompt_tokens=10,
        ok=True,
        t_first_byte_ns=40 * MS,
        t_first_token_ns=52 * MS,
        t_end_ns=80 * MS,
        chunk_times_ns=[52 * MS, 60 * MS, 76 * MS],
        chunk_tokens=[1, 2, 2],
        prompt_tokens=10,
        output_tokens=5,
    ),
    RequestRecord(
        id=2,
        warmup=False,
        t_sched_ns=5 * MS,
        t_send_ns=5 * MS,
        requested_output_tokens=5,
        requested_prompt_tokens=10,
        ok=False,
        error_class="http_500",
        t_end_ns=25 * MS,
    ),
]
SUMMARY = summarize(RECORDS)
# The metrics of a streamed run (SUMMARY's); a pooling run's (embeddings, rerank) are TestPooling's.
STREAMED = md.applicable(True)
STREAMED_NAMES = tuple(d.name for d in STREAMED)
fidelity_source = inspect.getsource(fidelity)


@dataclass
class Rule:
    """A duck-typed rule, as analysis/sla reads one (no validation of its own)."""

    metric: str
    stat: str | None
    op: str = "<"
    threshold: float = 1e12

    def text(self) -> str:
        return f"{self.stat} {self.metric}" if self.stat else self.metric


@dataclass
class Sla:
    rules: tuple = ()
    max_error_rate: float = 0.01
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None


def every_rule(with_absent: bool = True) -> list[str]:
    """One rule text per metric (and per stat, for a distribution) the registry defines;
    without ``with_absent``, not those of a kind RECORDS lack (a tool call's)."""
    out = []
    for d in STREAMED:
        if d.when_present and not with_absent:
            continue
        stats = md.RULE_STATS if d.kind == "distribution" else (None,)
        out += [f"{s} {d.name} < 1e12" if s else f"{d.name} < 1e12" for s in stats]
    return out


class TestRegistry:
    def test_the_table(self):
        """The registry itself, pinned: a metric added, removed or moved is a visible change."""
        assert [d.name for d in md.DISTRIBUTIONS] == [
            "ttft_ms",
            "ttfb_ms",
            "itl_ms",
            "itl_per_token_ms",
            "tpot_ms",
            "e2e_ms",
            "client_lag_ms",
            "ttft_from_sched_ms",
            "e2e_from_sched_ms",
            "ttft_tool_ms",
        ]
        assert [d.name for d in md.DISTRIBUTIONS if d.when_present] == ["ttft_tool_ms"]
        assert {d.name: d.same_as for d in md.DISTRIBUTIONS if d.same_as} == {
            "ttft_from_sched_ms": "ttft_ms",
            "e2e_from_sched_ms": "e2e_ms",
        }
        assert {d.name: d.path for d in md.RUN_SCALARS} == {
            "request_throughput_rps": ("metrics", "request_throughput_rps"),
            "input_tokens_per_s": ("metrics", "input_tokens_per_s"),
            "output_tokens_per_s": ("metrics", "output_tokens_per_s"),
            "total_tokens_per_s": ("metrics", "total_tokens_per_s"),
            "items_per_s": ("metrics", "items_per_s"),
            "goodput_rps": ("metrics", "goodput", "requests_per_s"),
            "goodput_output_tokens_per_s": ("metrics", "goodput", "output_tokens_per_s"),
            "goodput_attained_fraction": ("metrics", "goodput", "attained_fraction"),
            "error_rate": ("counts", "error_rate"),
            "mean_concurrency": ("metrics", "mean_concurrency"),
            "energy_per_output_token_j": ("telemetry", "energy", "j_per_output_token"),
            "energy_per_token_j": ("telemetry", "energy", "j_per_total_token"),
            "output_tokens_per_joule": ("telemetry", "energy", "output_tokens_per_j"),
            "gpu_power_w": ("telemetry", "energy", "mean_watts"),
        }
        # GPU energy: only runs that read their GPUs have it, and the gate judges it unresampled.
        energy = [d.name for d in md.RUN_SCALARS if d.when_present]
        assert (
            energy
            == [d.name for d in md.RUN_SCALARS if not d.resampled]
            == [
                "energy_per_output_token_j",
                "energy_per_token_j",
                "output_tokens_per_joule",
                "gpu_power_w",
            ]
        )
        assert tuple(d.name for d in md.DISTRIBUTIONS + md.RUN_SCALARS) == md.NAMES
        assert md.STATS == ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "p99_9", "max")
        for d in md.DISTRIBUTIONS:
            assert d.path == ("metrics", d.name) and d.unit == "ms" and d.samples is not None
        for d in md.RUN_SCALARS:
            assert d.samples is None and d.report in (None, "throughput", "goodput", "energy")
            assert d.same_as is None

    def test_get_and_lookup(self):
        assert md.get("ttft_ms").label == "TTFT"
        with pytest.raises(KeyError, match="unknown metric 'ttft'; valid: ttft_ms, ttfb_ms"):
            md.get("ttft")
        assert md.lookup(SUMMARY, "error_rate") == 1 / 3
        assert md.lookup(SUMMARY, "ttft_ms", "max") == 40.0
        assert md.lookup({}, "goodput_rps") is None

    def test_table_shows_a_twin_only_where_it_differs(self):
        """A distribution with ``same_as`` is shown when some table stat differs by more than
        both 1 % and 0.1 ms; never when the summary lacks it; others always."""
        ttft = md.get("ttft_from_sched_ms")
        assert md.table_shows(SUMMARY, ttft) and md.table_shows(SUMMARY, md.get("e2e_from_sched_ms"))
        assert md.table_shows(SUMMARY, md.get("ttft_ms"))
        assert not md.table_shows({}, md.get("ttft_ms"))  # absent: not this run's (embeddings)
        base = {"count": 3, **{s: 100.0 for s in md.TABLE_STATS}}

        def shows(**twin: float | None) -> bool:
            return md.table_shows(
                {"metrics": {"ttft_ms": base, "ttft_from_sched_ms": {**base, **twin}}}, ttft
            )

        assert not shows()  # a closed loop: equal
        assert not shows(p99=101.0) and shows(p99=101.01)  # 1 % of 100 ms
        assert not shows(mean=100.05)  # a slot's microseconds, under any table's resolution
        assert shows(p50=None)
        assert not md.table_shows({"metrics": {"ttft_ms": base}}, ttft)  # an older summary
        small = {"count": 3, **{s: 2.0 for s in md.TABLE_STATS}}
        for p90, shown in ((2.09, False), (2.11, True)):  # 4.5 % but under 0.1 ms; then over both
            twin = {**small, "p90": p90}
            assert md.table_shows({"metrics": {"ttft_ms": small, "ttft_from_sched_ms": twin}}, ttft) == shown


class TestProfileRules:
    def test_every_metric_is_accepted_in_a_profile(self):
        p = load_profile(
            None,
            sets=["workload.num_requests=4", "load.concurrency=1", f"sla.rules={json.dumps(every_rule())}"],
        )
        assert [r.text() for r in p.sla.rules] == [r.replace("1e12", "1e+12") for r in every_rule()]
        assert {r.metric for r in p.sla.rules} == set(STREAMED_NAMES)

    def test_accepts_exactly_what_the_evaluation_evaluates(self):
        """A (metric, stat) pair is a valid profile rule iff analysis/sla evaluates it without
        complaint on a summary that has data for every metric."""
        metrics = (*STREAMED_NAMES, "ttft", "goodput", "latency_ms", "p99")
        stats = (None, *md.STATS, "p42", "p99.9")
        accepted = set()
        for metric in metrics:
            for stat in stats:
                try:
                    SlaRule.model_validate({"metric": metric, "stat": stat, "op": "<", "threshold": 1e12})
                    config_ok = True
                except ValidationError:
                    config_ok = False
                # The error-rate check leads every verdict's details; the rule under test follows.
                _errors, detail = sla_mod.evaluate(Sla(rules=(Rule(metric, stat),)), SUMMARY)["details"]
                # A tool call's metric is a valid rule with no data in a run without tool calls.
                absent = metric in md.BY_NAME and md.get(metric).when_present
                reason = detail["reason"]
                assert config_ok == (reason is None or (absent and reason.startswith("no data"))), (
                    metric,
                    stat,
                    reason,
                )
                if config_ok:  # 'p99.9' is accepted, as 'p99_9'
                    accepted.add((metric, stat and stat.replace(".", "_")))
        assert accepted == (
            {(d.name, s) for d in STREAMED if d.kind == "distribution" for s in md.RULE_STATS}
            | {(d.name, None) for d in STREAMED if d.kind == "run"}
        )

    def test_unknown_metric_lists_the_registry(self):
        with pytest.raises(ValidationError) as exc:
            SlaRule.model_validate("p99 ttft < 700")
        assert f"unknown metric 'ttft'; valid: {', '.join(md.NAMES)}" in str(exc.value)
        with pytest.raises(ValidationError, match="mean_concurrency is a run-level number"):
            SlaRule.model_validate("p99 mean_concurrency < 8")
        with pytest.raises(ValidationError, match="itl_per_token_ms needs a stat"):
            SlaRule.model_validate("itl_per_token_ms < 8")


class TestSummary:
    def test_every_metric_at_its_path(self):
        for d in md.DISTRIBUTIONS:
            dist = md.lookup(SUMMARY, d.name)
            if d.when_present:  # RECORDS made no tool call: absent, not an empty distribution
                assert dist is None, d.name
                continue
            assert tuple(dist) == md.STATS and dist["count"] > 0, d.name
        for d in md.RUN_SCALARS:
            if d.when_present:  # no GPU was read for RECORDS: no telemetry block
                assert md.lookup(SUMMARY, d.name) is None, d.name
                continue
            if d.applies_to(True):
                assert isinstance(md.lookup(SUMMARY, d.name), float), d.name
            else:  # items/s: a pooling run's only
                assert not md.present(SUMMARY, d.name), d.name

    def test_key_order_of_the_metrics_block(self):
        """summary.json keeps its order: the registry's distributions, then the run numbers."""
        assert list(SUMMARY["metrics"]) == [
            *(d.name for d in md.DISTRIBUTIONS if not d.when_present),
            "request_throughput_rps",
            "input_tokens_per_s",
            "output_tokens_per_s",
            "total_tokens_per_s",
            "mean_concurrency",
            "littles_law",
            "goodput",
            "token_count_source",
            "prompt_tokens_source",
        ]
        assert list(SUMMARY["metrics"]["goodput"]) == [
            "requests_per_s",
            "output_tokens_per_s",
            "attained_fraction",
        ]

    def test_values(self):
        """Each distribution summarizes what its ``samples`` says (ok requests; client lag: all)."""
        m = SUMMARY["metrics"]
        assert [m[k]["count"] for k in md.NAMES[:9]] == [2, 2, 4, 8, 2, 2, 3, 2, 2]
        assert m["ttft_ms"]["mean"] == 34.5 and m["ttfb_ms"]["max"] == 28.0
        assert m["itl_ms"]["max"] == 16.0 and m["itl_per_token_ms"]["min"] == 10 / 3
        assert m["client_lag_ms"]["max"] == 2.0 and m["e2e_ms"]["min"] == 54.0
        # from t_sched: sent 1 and 2 ms late, so TTFT 29, 40 -> 30, 42 and E2E 54, 68 -> 55, 70
        assert m["ttft_from_sched_ms"]["mean"] == 36.0 and m["e2e_from_sched_ms"]["min"] == 55.0
        samples = distribution_samples(RECORDS)
        assert list(samples) == list(md.NAMES[:10])
        assert distribution(samples.pop("ttft_tool_ms"))["count"] == 0  # no tool call: absent from m
        for name, values in samples.items():
            assert distribution(values) == m[name]

    def test_request_columns_are_the_per_request_distributions(self):
        assert set(DERIVED_COLUMNS) == {
            d.name for d in md.DISTRIBUTIONS if d.samples in ("ok_requests", "measured_requests")
        }


class TestSlaEvaluation:
    def test_every_profile_rule_finds_its_value(self):
        p = load_profile(
            None,
            sets=[
                "workload.num_requests=4",
                "load.concurrency=1",
                f"sla.rules={json.dumps(every_rule(with_absent=False))}",
                "sla.max_error_rate=1",  # RECORDS hold failures on purpose
            ],
        )
        block = summarize(RECORDS, sla=p.sla)["sla"]
        assert block["verdict"] == "pass"
        errors, *details = block["details"]
        assert errors["max_error_rate"] is True and errors["passed"] is True
        assert len(details) == len(every_rule(with_absent=False))
        for d in details:
            assert d["reason"] is None, d
            assert d["value"] == md.lookup(SUMMARY, d["metric"], d["stat"])


class TestGate:
    def test_rules_accept_exactly_the_gated_metrics(self):
        accepted = set()
        for d in md.METRICS:
            try:
                GateRule.model_validate(
                    {"metric": d.name, "max": 1, "stat": "p99" if d.kind == "distribution" else None}
                )
                accepted.add(d.name)
            except ValidationError as exc:
                assert "not resampled by the bootstrap" in str(exc)
        assert accepted == {d.name for d in md.GATED} == set(md.NAMES) - {"mean_concurrency", "ttft_tool_ms"}
        assert bs.STATS == md.GATE_STATS == ("p50", "p90", "p95", "p99", "p99_9", "mean")
        with pytest.raises(ValidationError, match="unknown metric 'ttft'"):
            GateRule.model_validate({"metric": "ttft", "stat": "p99", "max": 1})

    def test_direction_of_regression_comes_from_the_registry(self):
        for d in md.GATED:
            rule = GateRule.model_validate(
                {
                    "metric": d.name,
                    "max_regression": "10%",
                    "stat": "p50" if d.kind == "distribution" else None,
                }
            )
            assert rule.limit() == ((">=", 0.9) if d.higher_is_better else ("<=", 1.1)), d.name
        assert {
            "request_throughput_rps",
            "input_tokens_per_s",
            "output_tokens_per_s",
            "total_tokens_per_s",
            "items_per_s",
            "goodput_rps",
            "goodput_output_tokens_per_s",
            "goodput_attained_fraction",
            "output_tokens_per_joule",
        } == bs.HIGHER_IS_BETTER

    def test_bootstrap_reproduces_every_gated_metric(self):
        """With every request drawn once, the bootstrap's statistic is the summary's value."""
        run = bs.RunSamples.from_run(RECORDS, SUMMARY)
        for d in (d for d in md.GATED if d.applies_to(True)):
            if not d.resampled:  # judged on the summary's value (analysis.gate_summary)
                assert d.name not in bs.RATE_METRICS
                continue
            for stat in md.GATE_STATS if d.kind == "distribution" else (None,):
                assert bs.statistic(run, d.name, stat) == pytest.approx(
                    md.lookup(SUMMARY, d.name, stat), rel=1e-12
                ), (d.name, stat)


class TestCompare:
    def test_rows_are_the_registry_metrics_shown_in_compare(self):
        dists = [d.name for d in md.DISTRIBUTIONS if d.compare]
        assert dists == list(LATENCIES) == ["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"]
        assert list(TABLE_ROWS) == [
            *(f"{m} {s}" for m in dists for s in md.TABLE_STATS),
            *(d.name for d in md.RUN_SCALARS if d.compare and not d.when_present),
            *TABLE_COUNTS,
        ]
        assert {r.split(" ")[0] for r in TABLE_ROWS} - set(TABLE_COUNTS) == {
            d.name for d in md.METRICS if d.compare and not d.when_present
        }
        for row in TABLE_ROWS:
            metric, _, stat = row.partition(" ")
            want = (
                SUMMARY["counts"][metric]
                if metric in TABLE_COUNTS
                else md.lookup(SUMMARY, metric, stat or None)
            )
            assert metric_value(SUMMARY, row) == want, row

    def test_markdown_plots_each_compared_distribution(self):
        text = compare_report.markdown(loadgen.compare([RUNS / "base-a", RUNS / "slow-ttft"]))
        images = [line for line in text.splitlines() if line.startswith("![")]
        assert images == [f"![{md.get(m).plot_title} CDF](cdf_{m}.png)" for m in LATENCIES]


class TestShown:
    def test_console_latency_rows(self):
        table = summary_table(SUMMARY)
        shown = [d for d in md.DISTRIBUTIONS if d.console and not d.when_present]
        assert [c.header for c in table.columns] == [
            "metric",
            "n",
            "mean",
            "p50",
            "p90",
            "p95",
            "p99",
            "p99.9",
            "max",
        ]
        assert (
            list(table.columns[0].cells)
            == [d.label for d in shown]
            == [
                "TTFT",
                "TTFB",
                "ITL (per chunk)",
                "ITL (per token)",
                "TPOT",
                "E2E",
                "client lag",
                "TTFT from schedule",
                "E2E from schedule",
            ]
        )
        means = list(table.columns[2].cells)
        for d, cell in zip(shown, means):
            assert cell == f"{md.lookup(SUMMARY, d.name, 'mean'):,.{d.digits}f}", d.name

    def test_report_tables(self):
        lat = latency_table(SUMMARY)
        assert lat.header == ("metric (ms)", "n", "p50", "p90", "p95", "p99", "p99.9", "mean")
        assert [r[0] for r in lat.rows] == [
            d.label for d in md.DISTRIBUTIONS if d.report == "latency" and not d.when_present
        ]
        thr = throughput_section(SUMMARY).blocks[0]
        assert [r[0] for r in thr.rows] == [
            *(d.label for d in STREAMED if d.kind == "run" and d.report == "throughput"),
            "requests",
        ]
        assert thr.rows[0] == ("requests/s", f"{SUMMARY['metrics']['request_throughput_rps']:,.2f}")
        goodput = [
            b for b in sla_section(SUMMARY).blocks if getattr(b, "header", None) == ("goodput", "value")
        ]
        (good,) = goodput
        assert [r[0] for r in good.rows] == [
            "per-request SLOs",
            *(d.label for d in md.RUN_SCALARS if d.report == "goodput"),
        ]
        assert good.rows[-1] == ("requests that met every SLO", "66.7%")

    def test_from_schedule_rows_only_where_they_differ(self):
        """Sent on time (closed loop), TTFT and E2E from schedule equal TTFT and E2E: neither
        the console nor the report shows them twice. Sent late, both show them, and the report
        says what they include."""
        on_time = summarize([replace(r, t_sched_ns=r.t_send_ns) for r in RECORDS])
        twins = {d.label for d in md.DISTRIBUTIONS if d.same_as}
        assert twins == {"TTFT from schedule", "E2E from schedule"}
        for summary, shown in ((on_time, False), (SUMMARY, True)):
            console_rows = set(summary_table(summary).columns[0].cells)
            report_rows = {r[0] for r in latency_table(summary).rows}
            text = latency_section(summary).blocks[1].text
            assert console_rows & twins == report_rows & twins == (twins if shown else set())
            assert ("include the time the request waited to be sent" in text) == shown
        assert {r[0] for r in latency_table(on_time).rows} == {
            d.label for d in md.DISTRIBUTIONS if d.report == "latency" and not d.when_present
        } - twins

    def test_every_metric_is_shown(self):
        """Each metric is a row of the console's or the report's tables, except the error rate
        (the report's errors section states it)."""
        hidden = {d.name for d in md.METRICS if not d.console and d.report is None}
        assert hidden == {"error_rate"}


class TestDerivedLists:
    """Every list of rows, labels, curves, SLO fields and derived columns is the registry's."""

    def test_each_per_request_distribution_carries_its_formula(self):
        """Record 0 was sent at 1 ms, first token at 30, last chunk at 50 (5 tokens), end at 55."""
        cols = derived_columns(RECORDS)
        assert list(cols) == list(DERIVED_COLUMNS) == [d.name for d in md.PER_REQUEST]
        assert all(d.formula is not None for d in md.PER_REQUEST)
        assert [cols[k][0] for k in DERIVED_COLUMNS[:7]] == [29.0, 19.0, 5.0, 54.0, 1.0, 30.0, 55.0]
        assert DERIVED_COLUMNS[7:] == ("ttft_tool_ms",) and np.isnan(cols["ttft_tool_ms"]).all()
        # the failed request: a TTFB/TTFT/TPOT never came, and a failure's end is no latency
        assert [k for k in DERIVED_COLUMNS if not math.isnan(cols[k][2])] == ["client_lag_ms"]

    def test_one_tpot_formula_for_the_summary_the_server_comparison_and_fidelity(self):
        """(last chunk - first token) / (output tokens - 1): 20 / 4 and 24 / 4 ms."""
        assert md.tpot_ms(30 * MS, 50 * MS, 5) == 5.0
        assert SUMMARY["metrics"]["tpot_ms"]["mean"] == 5.5
        assert client_means(RECORDS)["tpot"] == 5.5
        assert fidelity_source.count("metric_defs.tpot_ms(") == 1

    def test_client_vs_server_rows(self):
        assert (
            tuple((d.name.removesuffix("_ms"), d.server_histogram, d.label) for d in md.SERVER_COMPARED)
            == COMPARED
        )
        assert [c.key for c in COMPARED] == ["ttft", "itl", "itl_per_token", "tpot", "e2e"]
        assert MEAN_ROWS == (
            ("TTFT", "ttft", "ttft"),
            ("ITL (per chunk)", "itl", "itl"),
            ("ITL (per token)", "itl_per_token", "itl"),
            ("TPOT", "tpot", "tpot"),
            ("E2E", "e2e", "e2e"),
            ("queue time (server only)", None, "queue_time"),
        )

    def test_curve_columns_and_plots(self):
        assert CURVE_METRICS == tuple(d.name for d in md.CURVE) == ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms")
        assert tuple((d.name, d.label) for d in md.CURVE_PLOTS) == CURVE_LATENCIES
        assert CURVE_LATENCIES == (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E"))

    def test_slo_fields(self):
        assert sla_mod.SLO_FIELDS == md.SLOS == ("ttft_ms", "tpot_ms", "e2e_ms")
        assert list(SlaConfig.model_fields)[: len(md.SLOS)] == list(md.SLOS)
        assert {f"profile.sla.{n}" for n in md.SLOS} <= set(GATE_FIELDS)

    def test_one_rule_grammar_for_the_profile_and_the_evaluation(self):
        assert parse_rule("p99.9 tpot_ms <= 5") == ParsedRule("p99_9", "tpot_ms", "<=", 5.0)
        with pytest.raises(ValueError, match="grammar"):
            parse_rule("p99 tpot_ms ~ 5")
        # The evaluation has no grammar of its own: it reads the rule the profile parsed.
        rule = SlaRule.model_validate("p99.9 tpot_ms <= 5")
        assert sla_mod.evaluate(Sla(rules=(rule,)), SUMMARY)["rules"][-1] == "p99_9 tpot_ms <= 5"


# Adding a metric is this one entry in loadgen/metric_defs/catalogue.py, after e2e_from_sched_ms
# (the test below inserts it into a copy of the package and reads every list from there).
NEW_ENTRY = """    _dist(
        "decode_ms",
        "decode",
        "ok_requests",
        "first to last token-bearing chunk: the stream's decode as the client saw it",
        formula=Span("t_first_token_ns", "t_last_chunk_ns", ok_only=True),
        console=True,
        report="latency",
        slo=True,
        curve=True,
    ),
"""
CONSUMERS = """
import json, sys
from loadgen import metric_defs as md
from loadgen.analysis import sla, curve, compare
from loadgen.analysis.gate import GATE_FIELDS
from loadgen.analysis.metrics import DERIVED_COLUMNS, summarize
from loadgen.cli.console import summary_table
from loadgen.config import SlaConfig, SlaRule
from loadgen.config.gate_rules import GateRule
from loadgen.records import RequestRecord
from loadgen.report.sections import latency_table

records = [RequestRecord(**r) for r in json.loads(sys.argv[1])]
summary = summarize(records, sla=SlaConfig(decode_ms=21, max_error_rate=1, rules=("p99 decode_ms < 30",)))
print(json.dumps({
    "mean": summary["metrics"]["decode_ms"]["mean"],
    "goodput": summary["metrics"]["goodput"]["attained_fraction"],
    "sla": [d["value"] for d in summary["sla"]["details"]],
    "derived": "decode_ms" in DERIVED_COLUMNS,
    "slo": "decode_ms" in sla.SLO_FIELDS and "profile.sla.decode_ms" in GATE_FIELDS,
    "curve": "decode_ms" in curve.CURVE_METRICS,
    "compare": "decode_ms p99" in compare.TABLE_ROWS,
    "rule": SlaRule.model_validate("p99 decode_ms < 30").text(),
    "gate": GateRule.model_validate({"metric": "decode_ms", "stat": "p99", "max": 1}).text(),
    "console": "decode" in summary_table(summary).columns[0].cells,
    "report": "decode" in [r[0] for r in latency_table(summary).rows],
}))
"""


def test_a_metric_added_as_one_entry_is_computed_and_listed_everywhere(tmp_path):
    """The registry's promise, kept: one entry, and the summary computes it, SLOs and SLA and
    gate rules accept it, and the curve, compare, console and report tables carry it."""
    package = Path(loadgen.__file__).parent
    copy = tmp_path / "loadgen"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    catalogue = copy / "metric_defs" / "catalogue.py"
    text = catalogue.read_text()
    anchor = '    _run(\n        "request_throughput_rps",'
    assert text.count(anchor) == 1
    catalogue.write_text(text.replace(anchor, NEW_ENTRY + anchor))
    records = json.dumps([asdict(r) for r in RECORDS])
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", CONSUMERS, records], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    # decode 20 and 24 ms; the SLO of 21 ms leaves one good request of the 3 that finished
    assert got.pop("mean") == 22.0 and got.pop("goodput") == 1 / 3
    assert got.pop("sla") == [1 / 3, 23.96]  # the error rate (1 of 3 failed), then the rule
    assert got.pop("rule") == "p99 decode_ms < 30" and got.pop("gate") == "p99 decode_ms max 1"
    assert got == dict.fromkeys(("derived", "slo", "curve", "compare", "console", "report"), True)
