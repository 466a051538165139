"""`loadgen report`: report.md / report.html / plots / CSV / Parquet / cost.json of a saved run.

Golden tests on the committed fixture runs (tests/fixtures/runs, made by make_runs.py), each
copied to a temporary directory first. The HTML test renders the page in headless Chromium.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from loadgen.analysis.cost import CostInputs
from loadgen.analysis.metrics import request_frame
from loadgen.cli.main import main
from loadgen.records import RequestRecord
from loadgen.report import CostError, cost_figures, cost_inputs, write_report
from loadgen.report.plots import thresholds
from loadgen.report.timeseries import per_second
from loadgen.result import load_records, load_summary

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
ARTIFACTS = Path(__file__).parents[1] / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
PLOTS = ("cdf_e2e", "cdf_itl", "cdf_tpot", "cdf_ttft", "e2e_over_time", "per_second", "ttft_over_time")
CSV_COLUMNS = [
    "id",
    "warmup",
    "t_sched_ns",
    "t_send_ns",
    "requested_output_tokens",
    "requested_prompt_tokens",
    "ok",
    "error_class",
    "error_message",
    "http_status",
    "retry_after_s",
    "attempts",
    "retry_reason",
    "response_id",
    "t_first_byte_ns",
    "t_first_token_ns",
    "t_first_content_ns",
    "t_first_tool_ns",
    "t_end_ns",
    "conn_reused",
    "t_conn_start_ns",
    "t_dns_ns",
    "t_connect_ns",
    "t_tls_ns",
    "t_written_ns",
    "t_last_byte_ns",
    "prompt_tokens",
    "output_tokens",
    "server_prompt_ms",
    "server_predicted_ms",
    "server_predicted_tokens",
    "token_source",
    "prompt_tokens_source",
    "worker",
    "replica",
    "stage",
    "session_id",
    "turn",
    "model",
    "items",
    "finish_reason",
    "stream_end",
    "tool_calls",
    "json_valid",
    "images",
    "audio_clips",
    "media_bytes",
    "megapixels",
    "audio_s",
    "prompt_hash",
    "answer_truncated",
    "correct",
    "ttft_ms",  # the registry's per-request distributions, in its order
    "ttfb_ms",
    "tpot_ms",
    "e2e_ms",
    "client_lag_ms",
    "ttft_from_sched_ms",
    "e2e_from_sched_ms",
    "ttft_tool_ms",
]


def copy_run(name: str, dest: Path) -> Path:
    return Path(shutil.copytree(RUNS / name, dest / name))


@pytest.fixture(scope="module")
def base_a(tmp_path_factory) -> Path:
    """base-a's report, written once with a GPU price of $3.60/h on 2 GPUs given as labels."""
    run = copy_run("base-a", tmp_path_factory.mktemp("runs"))
    summary = json.loads((run / "summary.json").read_text())
    summary["conditions"]["labels"].update(gpu_hour_cost="3.6", gpu_count="2")
    (run / "summary.json").write_text(json.dumps(summary))
    write_report(run)
    return run


@pytest.fixture(scope="module")
def with_errors(tmp_path_factory) -> Path:
    run = copy_run("with-errors", tmp_path_factory.mktemp("runs"))
    write_report(run)
    return run


class TestMarkdown:
    def test_latency_table_rows_are_exact(self, base_a):
        """Each row is summary.json's metric at two decimals: p50 p90 p95 p99 p99.9 mean."""
        lines = (base_a / "report.md").read_text().splitlines()
        assert "| metric (ms) | n | p50 | p90 | p95 | p99 | p99.9 | mean |" in lines
        assert "| TTFT | 120 | 52.76 | 53.86 | 54.03 | 54.88 | 55.06 | 52.64 |" in lines
        assert "| TTFB | 120 | 2.71 | 3.82 | 4.11 | 4.26 | 4.38 | 2.56 |" in lines
        assert "| ITL (per chunk) | 2760 | 9.97 | 10.91 | 11.11 | 11.65 | 12.67 | 10.02 |" in lines
        assert "| TPOT | 120 | 10.01 | 10.09 | 10.11 | 10.14 | 10.14 | 10.02 |" in lines
        assert "| E2E | 120 | 283.71 | 284.64 | 285.28 | 286.18 | 286.36 | 283.48 |" in lines
        assert "| output tokens/s | 676.45 |" in lines
        assert "| requests/s | 28.19 |" in lines

    def test_sections_come_in_order_conditions_first(self, base_a):
        """The headline, then conditions, SLA, latency, throughput, errors, client, server,
        Little's law, cost, the interactive section (report.md: its slowest requests), plots."""
        heads = [ln for ln in (base_a / "report.md").read_text().splitlines() if ln.startswith("## ")]
        assert heads == [
            "## At a glance",
            "## Conditions",
            "## SLA and goodput",
            "## Latency",
            "## Throughput",
            "## Errors",
            "## Client health",
            "## Server view",
            "## Little's law",
            "## Cost",
            "## Interactive",
            "## Plots",
        ]

    def test_conditions_list_model_labels_and_lengths(self, base_a):
        """The conditions block names the target, model, server, load, labels and lengths."""
        lines = (base_a / "report.md").read_text().splitlines()
        assert "| target | http://127.0.0.1:36021 (chat endpoint) |" in lines
        assert "| model | test-model |" in lines
        assert "| server headers | server: Python/3.11 aiohttp/3.14.5 |" in lines
        assert "| load | closed loop, concurrency 8; 8 warm-up requests (excluded) |" in lines
        assert "| labels | gpu=H100, precision=fp16, gpu_hour_cost=3.6, gpu_count=2 |" in lines
        assert "| input tokens | fixed 64 | 64.0 / 64.0 / 64.0 / 64.0 | 67.0 / 67.0 / 67.0 / 67.0 |" in lines
        assert any(ln.startswith("| prompt lengths | approximate") for ln in lines)

    def test_sla_verdict_and_little(self, base_a):
        """The verdict, each rule with its measured value, and the Little's-law ratio."""
        text = (base_a / "report.md").read_text()
        assert "> **[OK] SLA verdict: PASS**" in text
        assert "| p99 ttft_ms < 100 | 54.88 | pass |" in text
        assert "| ratio | 1.001 |" in text
        assert "> **[OK] The client kept up:**" in text

    def test_error_classes_are_tabled(self, with_errors):
        """A run with failures shows each error class, its count and share, and the verdict."""
        text = (with_errors / "report.md").read_text()
        assert (
            "| error class | requests | share of sent |\n| --- | --: | --: |\n| http_500 | 10 | 10.0% |"
            in text
        )
        assert "Error rate 10.00% (failed / (ok + failed))" in text
        assert "| error_rate < 0.05 | 0.1 | FAIL |" in text
        assert "> **[FAIL] SLA verdict: FAIL**" in text

    def test_client_warning_is_shown_first(self, tmp_path):
        """A client_limited warning from summary.client is an alert above everything else."""
        run = copy_run("base-a", tmp_path)
        summary = json.loads((run / "summary.json").read_text())
        summary["client"]["warnings"] = [
            {
                "warning": "client_limited",
                "reasons": ["client process used 97% of a core"],
                "message": "the client, not the server, may have limited this run",
            }
        ]
        (run / "summary.json").write_text(json.dumps(summary))
        write_report(run)
        text = (run / "report.md").read_text()
        alert = (
            "> **[WARNING] client_limited:** the client, not the server, may have limited this run "
            "(client process used 97% of a core)"
        )
        assert text.index(alert) < text.index("## Conditions")
        assert text.count(alert) == 2  # at the top, and again in the client section


class TestTables:
    def test_csv_has_one_row_per_record_and_the_frame_columns(self, base_a):
        csv = pd.read_csv(base_a / "requests.csv")
        assert list(csv.columns) == CSV_COLUMNS
        assert len(csv) == 128 == len(load_records(base_a))
        assert csv["warmup"].sum() == 8

    def test_parquet_round_trips_to_the_same_frame(self, base_a):
        """requests.parquet reads back as exactly metrics.request_frame of the records."""
        expected = request_frame(load_records(base_a))
        pd.testing.assert_frame_equal(pd.read_parquet(base_a / "requests.parquet"), expected)

    def test_returns_every_file_written(self, base_a):
        written = write_report(base_a, base_a / "again")
        assert sorted(written) == sorted(
            [
                "cost.json",
                "report.html",
                "report.md",
                "requests.csv",
                "requests.parquet",
                *(f"plots/{p}.png" for p in PLOTS),
            ]
        )
        assert all(p.exists() and base_a / "again" in p.parents for p in written.values())


class TestCost:
    def test_dollars_per_million_tokens(self):
        """$3.60/h x 2 GPUs = $0.002/s: at 1000 output tok/s that is $2 per million."""
        summary = {
            "metrics": {
                "output_tokens_per_s": 1000.0,
                "total_tokens_per_s": 4000.0,
                "goodput": {"output_tokens_per_s": 500.0},
            }
        }
        c = cost_figures(summary, CostInputs(3.6, 2.0, "--gpu-hour-cost", "label gpu_count"))
        assert c["usd_per_hour"] == pytest.approx(7.2, rel=1e-15)
        assert c["usd_per_million_output_tokens"] == pytest.approx(2.0, rel=1e-12)
        assert c["usd_per_million_total_tokens"] == pytest.approx(0.5, rel=1e-12)
        assert c["usd_per_million_output_tokens_at_goodput"] == pytest.approx(4.0, rel=1e-12)

    def test_cost_json_and_section_of_a_run(self, base_a):
        """Labels gpu_hour_cost=3.6 and gpu_count=2 price base-a's 676.45 output tok/s."""
        c = json.loads((base_a / "cost.json").read_text())
        assert c["source"] == {"gpu_hour_cost": "label gpu_hour_cost", "gpu_count": "label gpu_count"}
        assert c["usd_per_million_output_tokens"] == pytest.approx(
            7.2 / 3600 / 676.4508150847239 * 1e6, rel=1e-12
        )
        assert c["usd_per_million_total_tokens"] == pytest.approx(
            7.2 / 3600 / 2564.8760071962447 * 1e6, rel=1e-12
        )
        text = (base_a / "report.md").read_text()
        assert "$3.6 per GPU-hour (label gpu_hour_cost) x 2 GPUs (label gpu_count) = $7.2 per hour." in text
        assert "| output tokens | 676.45 | $2.957 |" in text
        assert "| total tokens (input + output) | 2,564.88 | $0.7798 |" in text
        assert "| output tokens at goodput | 676.45 | $2.957 |" in text

    def test_flags_override_labels_and_count_defaults_to_one(self):
        assert cost_inputs({"gpu_hour_cost": "9", "gpu_count": "4"}, gpu_hour_cost=2.0) == CostInputs(
            2.0, 4.0, "--gpu-hour-cost", "label gpu_count"
        )
        assert cost_inputs({}, gpu_hour_cost=2.0).gpu_count == 1.0
        assert cost_inputs({"gpu": "H100"}) is None

    def test_bad_price_names_its_source(self):
        with pytest.raises(CostError, match="label gpu_hour_cost: 'cheap' is not a number"):
            cost_inputs({"gpu_hour_cost": "cheap"})

    def test_no_price_no_cost_json(self, with_errors):
        assert not (with_errors / "cost.json").exists()
        assert "Not computed: give the price of a GPU-hour" in (with_errors / "report.md").read_text()


class TestPlotData:
    def test_per_second_bins(self):
        """Tokens, time-averaged in-flight and errors per second; the last bin is 0.5 s wide."""
        s = 1_000_000_000
        a = RequestRecord(
            0,
            False,
            0,
            0,
            3,
            8,
            ok=True,
            t_end_ns=3 * s // 2,
            chunk_times_ns=[s // 2, 12 * s // 10],
            chunk_tokens=[1, 2],
        )
        b = RequestRecord(1, False, s // 2, s // 2, 3, 8, ok=False, error_class="http_500", t_end_ns=s)
        warm = RequestRecord(2, True, -s, -s, 3, 8, ok=True, t_end_ns=s, chunk_times_ns=[0], chunk_tokens=[5])
        bins = per_second([warm, a, b])
        assert bins.to_dict("list") == {
            "t_s": [0.0, 1.0],
            "width_s": [1.0, 0.5],
            "output_tokens_per_s": [1.0, 4.0],
            "in_flight": [1.5, 1.0],
            "errors": [0, 1],
        }

    def test_sla_thresholds_for_a_metric(self):
        """The per-request SLO and every rule on the metric are drawn on its plots."""
        summary = load_summary(RUNS / "base-a")
        assert thresholds(summary, ("ttft_ms",)) == [
            ("SLO ttft_ms <= 80", 80.0),
            ("p99 ttft_ms < 100", 100.0),
        ]
        assert thresholds(summary, ("e2e_ms",)) == []


class TestCli:
    def test_report_command(self, tmp_path, capsys):
        run = copy_run("base-a", tmp_path)
        assert (
            main(
                [
                    "report",
                    str(run),
                    "-o",
                    str(tmp_path / "out"),
                    "--gpu-hour-cost",
                    "2.5",
                    "--gpu-count",
                    "8",
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert f"wrote {tmp_path / 'out' / 'report.html'}\n" in out
        assert out.endswith(
            "cost  $8.213 per million output tokens, $2.166 per million total tokens, "
            "$8.213 per million output tokens at goodput\n"
        )
        assert not (run / "report.md").exists()

    def test_not_a_run_exits_2(self, tmp_path, capsys):
        assert main(["report", str(tmp_path)]) == 2
        assert "not a loadgen run directory" in capsys.readouterr().err


class TestHtml:
    def test_self_contained(self, base_a):
        """Every image is a data URI and nothing points off the page."""
        page = (base_a / "report.html").read_text()
        srcs = re.findall(r'src="([^"]*)"', page)
        assert len(srcs) == len(PLOTS) and all(s.startswith("data:image/png;base64,") for s in srcs)
        assert not re.search(r'(src|href)="(https?:)?//', page)
        assert "Content-Security-Policy" in page

    @pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="/usr/bin/chromium not installed (Debian package 'chromium'; .ci/run installs it)",
    )
    @pytest.mark.slow
    def test_renders_in_headless_chromium(self, base_a, tmp_path):
        """Chromium loads every plot, logs no console error, and a screenshot is kept."""
        url = (base_a / "report.html").as_uri()
        dom, log = _chromium(
            tmp_path, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom", url
        )
        body = re.search(r"<body([^>]*)>", dom).group(1)
        attrs = {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', body)}
        assert attrs["data-loaded"] == "1"
        assert attrs["data-images-total"] == str(len(PLOTS))
        assert attrs["data-images-ok"] == str(len(PLOTS))
        assert json.loads(attrs["data-errors"]) == []
        assert [ln for ln in log.splitlines() if ":CONSOLE" in ln] == []

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "report-base-a.png"
        shot.unlink(missing_ok=True)
        _chromium(tmp_path, "--hide-scrollbars", "--window-size=1280,5200", f"--screenshot={shot}", url)
        assert shot.stat().st_size > 50_000
        print(f"screenshot: {shot}")


def _chromium(tmp: Path, *args: str) -> tuple[str, str]:
    profile = tmp / f"chromium-profile-{len(list(tmp.glob('chromium-profile-*')))}"
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def test_the_backend_row_names_the_preset_and_only_what_the_run_set():
    """The built-in simulator's row is a sentence: its preset and the settings the profile's
    sim section gave, never a key=None dump of every setting left to the preset."""
    from loadgen.report.conditions import simulator_sentence

    config = {"preset": "llama3-8b-fp16@h100", "kv_precision": None, "time_scale": 0.5, "max_num_seqs": 256}
    asked = {"preset": "llama3-8b-fp16@h100", "time_scale": 0.5, "prefix_caching": False}
    said = simulator_sentence({"config": config}, asked)
    assert said == "built-in simulator, preset llama3-8b-fp16@h100; set: time_scale 0.5, prefix_caching False"
    assert simulator_sentence({"config": config}, {}) == (
        "built-in simulator, preset llama3-8b-fp16@h100; the preset's settings"
    )
    assert "None" not in said
