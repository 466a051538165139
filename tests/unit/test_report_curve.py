"""The report of a multi-stage run (curve plots, the "Load stages" section) and the headline
every report opens with.

The multi-stage run is base-a's records under a summary given four literal stages (c=1, 2, 4,
8); its curve is made by ``analysis.curve.curve`` from them, as the runner makes it. The knee is
at c=4: doubling the users from 4 to 8 takes the throughput from 7 to 7.5 req/s (scaling 0.10).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.curve import curve
from loadgen.report import write_report
from loadgen.report.headline import capacity_sentence, headline_section, verdict_alert

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
CURVE_PLOTS = ("curve_e2e", "curve_goodput", "curve_output_tokens", "curve_tpot", "curve_ttft")
SINGLE_PLOTS = ("cdf_e2e", "cdf_itl", "cdf_tpot", "cdf_ttft", "e2e_over_time", "per_second", "ttft_over_time")
KNEE_RULE = (
    "the last stage before throughput stops scaling with the offered load "
    "(d log throughput / d log load < 0.5)"
)


# base-a's own blocks: what a stage's block has besides the literal figures below.
BASE = json.loads((RUNS / "base-a" / "summary.json").read_text())


def dist(name: str, p50: float, p90: float, p99: float) -> dict:
    """base-a's distribution ``name`` with the literal percentiles."""
    return {**BASE["metrics"][name], "p50": p50, "p90": p90, "p99": p99}


def stage(index: int, c: int, tput: float, ttft: tuple[float, float], verdict: str, **kw: Any) -> dict:
    """One stage's summary block, with literal figures (the rest base-a's)."""
    sent = kw.get("sent", 40)
    return {
        "index": index,
        "name": f"c={c}",
        "load": {"concurrency": c, "rate": None, "duration_s": 5.0},
        "interrupted": False,
        "counts": {
            **BASE["counts"],
            "sent": sent,
            "ok": sent - kw.get("failed", 0),
            "failed": kw.get("failed", 0),
            "error_rate": 0.0,
        },
        "metrics": {
            **BASE["metrics"],
            "request_throughput_rps": tput,
            "output_tokens_per_s": tput * 24,
            "goodput": {
                **BASE["metrics"]["goodput"],
                "requests_per_s": kw.get("goodput", tput),
                "attained_fraction": kw.get("attained", 1.0),
            },
            "mean_concurrency": c * 0.9,
            "ttft_ms": dist("ttft_ms", ttft[0], ttft[1] * 0.9, ttft[1]),
            "tpot_ms": dist("tpot_ms", 10.0 + index, 10.5 + index, 11.0 + index),
            "e2e_ms": dist("e2e_ms", 280.0 + 10 * index, 290.0 + 10 * index, 300.0 + 10 * index),
            "itl_ms": dist("itl_ms", 10.0, 11.0, 12.0),
        },
        "sla": {**BASE["sla"], "verdict": verdict, "details": []},
        "saturation": {
            "verdict": kw.get("saturation", "stable"),
            "reason": kw.get("why", "nothing grows"),
            "bins": 8,
            "signals": {},
            "rule": "the rule",
        },
        "steady_state": {
            "steady": kw.get("reason") is None,
            "throughput_change": None,
            "in_flight_change": None,
            "reason": kw.get("reason"),
        },
    }


STAGES = [
    stage(
        0,
        1,
        2.0,
        (40.0, 50.0),
        "pass",
        sent=10,
        reason="10 measured requests (fewer than 12)",
        saturation="undetermined",
    ),
    stage(1, 2, 4.0, (42.0, 55.0), "pass"),
    stage(2, 4, 7.0, (48.0, 70.0), "pass"),
    stage(
        3,
        8,
        7.5,
        (120.0, 180.0),
        "fail",
        failed=2,
        goodput=3.0,
        attained=0.4,
        saturation="over_saturated",
        why="growing: outstanding, ttft_ms",
    ),
]


def copy_run(name: str, dest: Path) -> Path:
    return Path(shutil.copytree(RUNS / name, dest / name))


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> tuple[Path, dict]:
    run = copy_run("base-a", tmp_path_factory.mktemp("runs"))
    summary = json.loads((run / "summary.json").read_text())
    summary["stages"] = STAGES
    summary["curve"] = curve(STAGES)
    summary["capacity"] = {
        "capacity_rps": 7.2,
        "ci95": [6.8, 7.6],
        "attainment": 0.99,
        "slos": {"ttft_ms": 80.0},
        "goodput_rps": 7.0,
        "output_tokens_per_s": 168.0,
        "usd_per_million_output_tokens": None,
        "stages": [],
        "stopped_because": None,
        "method": "bisection",
    }
    (run / "summary.json").write_text(json.dumps(summary))
    return run, write_report(run)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    run = copy_run("base-a", tmp_path_factory.mktemp("runs"))
    write_report(run)
    return run


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of report.md."""
    start = text.index(f"## {heading}\n")
    nxt = text.find("\n## ", start + 1)
    return text[start : nxt if nxt >= 0 else len(text)]


def headings(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("## ")]


class TestMultiStage:
    def test_the_curve_is_as_designed(self, multi):
        """The literal stages put the knee at c=4, which is also the last stage meeting the SLA."""
        c = json.loads((multi[0] / "summary.json").read_text())["curve"]
        assert c["knee"]["stage"] == 2 and c["last_stage_meeting_sla"] == 2
        assert c["rules"]["knee"] == KNEE_RULE

    def test_curve_plots_are_written(self, multi):
        run, written = multi
        for name in CURVE_PLOTS:
            path = run / "plots" / f"{name}.png"
            assert written[f"plots/{name}.png"] == path
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000

    def test_load_stages_section_after_sla(self, multi):
        heads = headings((multi[0] / "report.md").read_text())
        assert heads[:4] == ["## At a glance", "## Conditions", "## SLA and goodput", "## Load stages"]
        assert heads[4] == "## Latency"

    def test_one_row_per_stage(self, multi):
        body = section((multi[0] / "report.md").read_text(), "Load stages")
        rows = [ln for ln in body.splitlines() if re.match(r"\| \d+ \(c=", ln)]
        assert rows == [
            "| 0 (c=1) | concurrency 1 | 10 / 10 / 0 | "
            "2.00 | 48.00 | 40.00 | 50.00 | 11.00 | 300.00 | 2.00 | pass | no | too few |",
            "| 1 (c=2) | concurrency 2 | 40 / 40 / 0 | "
            "4.00 | 96.00 | 42.00 | 55.00 | 12.00 | 310.00 | 4.00 | pass | yes | stable |",
            "| 2 (c=4) | concurrency 4 | 40 / 40 / 0 | "
            "7.00 | 168.00 | 48.00 | 70.00 | 13.00 | 320.00 | 7.00 | pass | yes | stable |",
            "| 3 (c=8) | concurrency 8 | 40 / 38 / 2 | "
            "7.50 | 180.00 | 120.00 | 180.00 | 14.00 | 330.00 | 3.00 | FAIL | yes | GROWING |",
        ]

    def test_an_over_saturated_stage_gets_its_alert(self, multi):
        body = section((multi[0] / "report.md").read_text(), "Load stages")
        assert "stage c=8 over-saturated:" in body and "growing: outstanding, ttft_ms" in body
        assert "Queue: whether the stage was over-saturated (the rule)." in body

    def test_knee_and_last_stage_meeting_sla_are_stated(self, multi):
        body = section((multi[0] / "report.md").read_text(), "Load stages")
        assert (
            "Knee: stage 2 (c=4), at 7.00 req/s; from it to the next stage throughput scaled 0.10 "
            f"with the load (1: it grew as fast). Rule: the knee is {KNEE_RULE}." in body
        )
        assert "Last stage meeting the SLA: stage 2 (c=4), at 7.00 req/s with p99 TTFT 70.00 ms." in body

    def test_unsteady_stage_gets_its_alert(self, multi):
        body = section((multi[0] / "report.md").read_text(), "Load stages")
        alert = (
            "> **[WARNING] stage c=1 too short or unstable to mean anything:** "
            "10 measured requests (fewer than 12)."
        )
        assert alert in body
        assert body.count("too short or unstable to mean anything") == 1

    def test_headline_comes_first_with_the_numbers(self, multi):
        text = (multi[0] / "report.md").read_text()
        assert headings(text)[0] == "## At a glance"
        head = section(text, "At a glance")
        assert text.index(head) < text.index("## Conditions")
        # base-a's pooled figures, then the knee's and the last passing stage's from the literals
        assert "| all 4 stages pooled | 52.76 | 54.88 | 10.01 | 28.19 | 676.45 | 28.19 | 100.0% |" in head
        assert "| knee: stage 2 (c=4) | 48.00 | 70.00 | 12.00 | 7.00 | 168.00 | 7.00 | 100.0% |" in head
        assert (
            "| last meeting SLA: stage 2 (c=4) | 48.00 | 70.00 | 12.00 | 7.00 | 168.00 | 7.00 | 100.0% |"
            in head
        )
        assert (
            "4 load stages, c=1 to c=8. Knee: stage 2 (c=4) at 7.00 req/s. Last stage meeting the SLA: "
            "stage 2 (c=4) at 7.00 req/s. Capacity: 7.20 req/s (95% CI 6.80 to 7.60), by bisection." in head
        )
        assert (
            "> **[OK] SLA: PASS** every rule met: p99 ttft_ms < 100, p99 tpot_ms < 15, error_rate < 0.05. "
            "The verdict pools all 4 stages; 3 of 4 met it alone." in head
        )

    def test_main_plot_in_headline_once(self, multi):
        """The throughput-vs-TTFT curve heads the report; the other curves are in Load stages."""
        text = (multi[0] / "report.md").read_text()
        assert "](plots/curve_ttft.png)" in section(text, "At a glance")
        assert text.count("](plots/curve_ttft.png)") == 1
        stages = section(text, "Load stages")
        assert all(f"](plots/{p}.png)" in stages for p in CURVE_PLOTS if p != "curve_ttft")
        assert "](plots/curve_" not in section(text, "Plots")

    def test_html_embeds_every_plot_once(self, multi):
        page = (multi[0] / "report.html").read_text()
        srcs = re.findall(r'src="([^"]*)"', page)
        assert len(srcs) == len(set(srcs)) == len(CURVE_PLOTS) + len(SINGLE_PLOTS)
        assert (
            page.index(">At a glance</h2>") < page.index(">Conditions</h2>") < page.index(">Load stages</h2>")
        )


class TestSingleStage:
    def test_headline_opens_the_report(self, single):
        text = (single / "report.md").read_text()
        assert headings(text)[:2] == ["## At a glance", "## Conditions"]
        assert "## Load stages" not in text
        head = section(text, "At a glance")
        assert "| the run | 52.76 | 54.88 | 10.01 | 28.19 | 676.45 | 28.19 | 100.0% |" in head
        assert (
            "> **[OK] SLA: PASS** every rule met: p99 ttft_ms < 100, p99 tpot_ms < 15, error_rate < 0.05."
            in head
        )
        assert "120 measured requests (120 ok, 0 failed)" in head

    def test_ttft_cdf_moves_to_the_headline(self, single):
        text = (single / "report.md").read_text()
        assert "](plots/cdf_ttft.png)" in section(text, "At a glance")
        assert text.count("](plots/cdf_ttft.png)") == 1
        assert not list((single / "plots").glob("curve_*"))


class TestHeadlineParts:
    def test_verdicts(self):
        fail = {
            "sla": {
                "verdict": "fail",
                "details": [
                    {"rule": "error_rate < 0.05", "value": 0.1, "passed": False},
                    {"rule": "p99 ttft_ms < 100", "value": 54.9, "passed": True},
                ],
            }
        }
        assert verdict_alert(fail).title == "SLA: FAIL"
        assert verdict_alert(fail).text == "failed: error_rate < 0.05 (measured 0.1)."
        incomplete = {"sla": {"verdict": "incomplete"}, "incomplete_reason": "stopped by Ctrl-C"}
        assert verdict_alert(incomplete).text == "stopped by Ctrl-C; no verdict is given."
        assert verdict_alert({}).title == "SLA: NONE"

    def test_the_error_rate_check_says_how_many_failed_first(self):
        """The error-rate check leads the details; the headline gives its reason, then the rest."""
        reason = "48 of 80 requests failed (read 40, http_400 8): error rate 60.0% > max_error_rate 1.0%"
        fail = {
            "sla": {
                "verdict": "fail",
                "details": [
                    {
                        "rule": "error_rate <= 0.01",
                        "value": 0.6,
                        "passed": False,
                        "reason": reason,
                        "max_error_rate": True,
                    },
                    {"rule": "p99 ttft_ms < 100", "value": 154.9, "passed": False},
                ],
            }
        }
        assert verdict_alert(fail).text == f"failed: {reason}; p99 ttft_ms < 100 (measured 154.9)."

    def test_capacity_absent_or_undetermined(self):
        assert capacity_sentence(None) == ""
        assert capacity_sentence({"capacity_rps": None}) == "Capacity: not confirmed."
        assert capacity_sentence({"capacity_rps": 12.345, "ci95": None}) == "Capacity: 12.35 req/s."
        assert capacity_sentence({"capacity_rps": None, "stopped_because": "max stages"}) == (
            "Capacity: not confirmed (max stages)."
        )

    def test_multi_stage_without_capacity(self):
        summary = {"stages": STAGES, "curve": curve(STAGES), "sla": {"verdict": "none"}}
        text = " ".join(getattr(b, "text", "") for b in headline_section(summary).blocks)
        assert "Capacity" not in text and "4 load stages, c=1 to c=8." in text
