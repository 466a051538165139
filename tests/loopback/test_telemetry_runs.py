"""GPU telemetry and energy per token on real runs of the built-in simulator, which serves a
DCGM exporter of its GPUs (/dcgm/metrics) and logs its exact energy at each request's arrival
and end: the client's energy per output token against that ground truth, utilisation and memory
against the engine's load, a compute-heavier preset against a lighter one, per-stage blocks, a
run without sources, gate rules on energy and compare's rows."""

from __future__ import annotations

import io

import orjson
import pytest

import loadgen
from loadgen.analysis.gate import gate
from loadgen.cli.console import print_summary
from loadgen.config.gate_rules import GateRules
from loadgen.report import write_report
from loadgen.report.gate import markdown as gate_markdown
from loadgen.result import GROUND_TRUTH
from loadgen.server.gpu_scraper import TELEMETRY

from helpers import profile, run

FP16, FP8 = "llama3-8b-fp16@h100", "llama3-8b-fp8@h100"


def sim_run(out, preset: str = FP16, **overrides):
    """96 requests of 256 tokens in, exactly 128 out, 16 users, at half the simulated time; the
    simulator's GPUs read every 50 ms."""
    settings = {
        "sim.preset": preset,
        "sim.time_scale": 0.5,
        "workload.num_requests": 96,
        "workload.input_tokens": 256,
        "workload.output_tokens": 128,
        "target.ignore_eos": True,
        "load.concurrency": 16,
        "telemetry.interval_s": 0.05,
        "telemetry.price_per_kwh": 0.15,
        **overrides,
    }
    return run(profile(out, None, **{k.replace(".", "__"): v for k, v in settings.items()}))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("telemetry")
    return {
        "fp16": sim_run(out),
        "fp8": sim_run(out, FP8, **{"sla.rules": ["energy_per_output_token_j < 1", "gpu_power_w < 50"]}),
        # An open loop at 4 requests/s of 32 tokens: the engine idles between them.
        "light": sim_run(
            out,
            **{
                "load.concurrency": None,
                "load.rate": 4,
                "workload.num_requests": 12,
                "workload.output_tokens": 32,
            },
        ),
        "stages": sim_run(
            out,
            **{"load.concurrency": None, "load.sweep": {"concurrency": [2, 16]}, "workload.num_requests": 48},
        ),
        "none": sim_run(out, **{"telemetry.simulator": False, "workload.num_requests": 16}),
    }


def truth_j_per_output_token(run_dir) -> float:
    """The simulator's own energy from the first request's arrival to the last one's end,
    divided by the tokens it generated."""
    log = [orjson.loads(line) for line in (run_dir / GROUND_TRUTH).read_bytes().splitlines()]
    start = min(r["gpu_energy_j"][0] for r in log)
    end = max(r["gpu_energy_j"][1] for r in log)
    return (end - start) / sum(r["output_tokens"] for r in log)


class TestEnergyPerToken:
    @pytest.mark.slow
    @pytest.mark.parametrize("name", ["fp16", "fp8"])
    def test_equals_the_simulators_ground_truth_within_2_percent(self, runs, name):
        res = runs[name]
        energy = res.summary["telemetry"]["energy"]
        truth = truth_j_per_output_token(res.run_dir)
        assert energy["j_per_output_token"] == pytest.approx(truth, rel=0.02)
        assert energy["output_tokens"] == 96 * 128 and energy["complete"] is True
        assert energy["output_tokens_per_j"] == pytest.approx(1 / energy["j_per_output_token"])
        assert energy["usd_per_million_output_tokens"] == pytest.approx(
            0.15 * energy["kwh"] / (96 * 128) * 1e6
        )

    @pytest.mark.slow
    def test_a_pooling_run_is_per_input_token(self, tmp_path):
        """Embeddings generate nothing: energy is per input token (the simulator's energy over
        the prompt tokens it pooled, within 2 %), with no per-output-token figure."""
        res = sim_run(
            tmp_path,
            **{
                "target.endpoint": "embeddings",
                "target.ignore_eos": False,
                "workload.output_tokens": None,
                "workload.batch_size": 4,
                "workload.num_requests": 48,
                "load.concurrency": 8,
            },
        )
        energy = res.summary["telemetry"]["energy"]
        log = [orjson.loads(line) for line in (res.run_dir / GROUND_TRUTH).read_bytes().splitlines()]
        joules = max(r["gpu_energy_j"][1] for r in log) - min(r["gpu_energy_j"][0] for r in log)
        assert energy["total_tokens"] == pytest.approx(sum(r["prompt_tokens"] for r in log))
        assert energy["j_per_total_token"] == pytest.approx(joules / energy["total_tokens"], rel=0.02)
        assert (energy["output_tokens"], energy["j_per_output_token"]) == (0, None)
        assert "energy_per_output_token_j" not in [d.name for d in loadgen.metric_defs.applicable(False)]
        assert "energy_per_token_j" in [d.name for d in loadgen.metric_defs.applicable(False)]
        out = io.StringIO()
        print_summary(res, file=out)
        (line,) = [x for x in out.getvalue().splitlines() if x.startswith("energy")]
        assert f"{energy['j_per_total_token']:.3f} J/input token" in line and "output" not in line
        write_report(res.run_dir, tmp_path / "report")
        md = (tmp_path / "report" / "report.md").read_text()
        section = md.split("## GPU telemetry and energy", 1)[1].split("\n## ", 1)[0]
        assert f"| joules per token | {energy['j_per_total_token']:.3f} |" in section
        assert "output token" not in section
        assert f"{energy['j_per_total_token']:.3f} J per input token" in md

    @pytest.mark.slow
    def test_rows_are_written_one_per_gpu_per_reading(self, runs):
        res = runs["fp16"]
        rows = [orjson.loads(line) for line in (res.run_dir / TELEMETRY).read_bytes().splitlines()]
        (source,) = res.summary["telemetry"]["sources"]
        assert source["kind"] == "simulator" and source["url"].endswith("/dcgm/metrics")
        assert len(rows) == source["readings"] >= 10
        assert {r["model"] for r in rows} == {"NVIDIA H100-SXM5-80GB"}
        assert [r["t_ns"] for r in rows] == sorted(r["t_ns"] for r in rows)

    @pytest.mark.slow
    def test_a_compute_heavier_preset_draws_more_power(self, runs):
        """FP16 weights: twice the bytes read per step, longer and more bandwidth-bound steps."""
        (g16,), (g8,) = runs["fp16"].summary["telemetry"]["gpus"], runs["fp8"].summary["telemetry"]["gpus"]
        assert g16["power_mean_w"] > g8["power_mean_w"] > 75
        e16, e8 = runs["fp16"].summary["telemetry"]["energy"], runs["fp8"].summary["telemetry"]["energy"]
        assert e16["j_per_output_token"] > 1.5 * e8["j_per_output_token"]


class TestSla:
    @pytest.mark.slow
    def test_rules_on_energy_are_evaluated_with_the_telemetry_block(self, runs):
        """The SLA is evaluated again once the GPUs' figures exist: each energy rule has its
        value (FP8 draws far less than 1 J per token and far more than 50 W)."""
        s = runs["fp8"].summary
        details = {d["rule"]: d for d in s["sla"]["details"]}
        one = details["energy_per_output_token_j < 1"]
        assert (one["value"], one["passed"]) == (s["telemetry"]["energy"]["j_per_output_token"], True)
        watts = details["gpu_power_w < 50"]
        assert (watts["value"], watts["passed"]) == (s["telemetry"]["energy"]["mean_watts"], False)
        assert s["sla"]["verdict"] == "fail"


class TestTracksTheEngine:
    @pytest.mark.slow
    def test_utilisation_is_high_when_the_engine_is_kept_busy_and_low_when_it_idles(self, runs):
        (busy,), (idle,) = (
            runs["fp16"].summary["telemetry"]["gpus"],
            runs["light"].summary["telemetry"]["gpus"],
        )
        assert busy["utilization_mean"] >= 0.9
        assert idle["utilization_mean"] < 0.5

    @pytest.mark.slow
    def test_memory_is_weights_plus_the_kv_blocks_of_the_requests_in_flight(self, runs):
        """Each request reserves its prompt (256 tokens and the chat template's, as the
        simulator counted them) plus 128 output tokens in blocks of 16 x 128 KiB: the peak is
        the weights plus a whole number of such reservations, more of them at 16 users than at
        2 (the sweep's stages), none beyond the users."""
        log = [
            orjson.loads(line) for line in (runs["stages"].run_dir / GROUND_TRUTH).read_bytes().splitlines()
        ]
        (reserved,) = {-(-(r["prompt_tokens"] + r["max_tokens"]) // 16) for r in log}
        weights, per_request = 16.06e9, reserved * 16 * 131072

        def in_flight(block):
            (g,) = block["gpus"]
            n = (g["memory_used_peak_bytes"] - weights) / per_request
            assert abs(n - round(n)) < 0.01, n  # the exporter rounds to MiB
            return round(n)

        two, sixteen = (s["telemetry"] for s in runs["stages"].summary["stages"])
        assert 1 <= in_flight(two) <= 2 < in_flight(sixteen) <= 16
        assert in_flight(runs["fp16"].summary["telemetry"]) <= 16

    @pytest.mark.slow
    def test_each_stage_has_its_own_block_on_its_own_window(self, runs):
        stages = runs["stages"].summary["stages"]
        blocks = [s["telemetry"] for s in stages]
        for s, b in zip(stages, blocks):
            assert b["energy"]["seconds"] == pytest.approx(s["window"]["seconds"])
        assert blocks[1]["gpus"][0]["power_mean_w"] > blocks[0]["gpus"][0]["power_mean_w"]


class TestWithoutSources:
    @pytest.mark.slow
    def test_no_block_and_the_conditions_say_why(self, runs):
        s = runs["none"].summary
        assert "telemetry" not in s
        assert s["conditions"]["telemetry"] == {"sources": [], "note": "no telemetry sources configured"}
        assert not (runs["none"].run_dir / TELEMETRY).exists()

    def test_an_exporter_that_refuses_is_a_note_and_its_login_reaches_no_file(self, tmp_path):
        """A DCGM URL with a password, on a port nothing listens on: the run completes, the
        note names the URL with its login redacted, and no file of the run holds the password."""
        url = "http://grafana:s3cretpass@127.0.0.1:9/metrics"
        res = sim_run(
            tmp_path, **{"telemetry.simulator": False, "telemetry.dcgm": [url], "workload.num_requests": 4}
        )
        assert res.summary["complete"] is True and "telemetry" not in res.summary
        (source,) = res.summary["conditions"]["telemetry"]["sources"]
        assert source["url"] == "http://***@127.0.0.1:9/metrics"
        assert source["note"].startswith("GET http://***@127.0.0.1:9/metrics: ")
        assert res.summary["conditions"]["profile"]["telemetry"]["dcgm"] == ["http://***@127.0.0.1:9/metrics"]
        for path in res.run_dir.rglob("*"):
            if path.is_file():
                assert b"s3cretpass" not in path.read_bytes(), path

    def test_nvml_without_its_library_is_a_note_not_a_failure(self, tmp_path):
        try:
            import pynvml  # noqa: F401
        except ImportError:
            pass
        else:
            pytest.skip("nvidia-ml-py is installed here")
        res = sim_run(
            tmp_path, **{"telemetry.simulator": False, "telemetry.nvml": True, "workload.num_requests": 4}
        )
        assert res.summary["complete"] is True and "telemetry" not in res.summary
        cond = res.summary["conditions"]["telemetry"]
        assert cond["sources"][0]["note"] == (
            "telemetry.nvml: nvidia-ml-py is not installed (pip install 'loadgen[nvml]')"
        )
        assert cond["note"].startswith("no telemetry source could be read: telemetry.nvml: nvidia-ml-py")


class TestGateAndCompare:
    def rules(self, *rules: dict) -> GateRules:
        return GateRules.model_validate({"rules": list(rules)})

    @pytest.mark.slow
    def test_energy_rules_judge_the_summaries_values(self, runs):
        """FP8 against FP16: about half the joules per output token, so a 10% regression bound
        passes one way and fails the other; not resampled (one counter difference per run)."""
        fp16, fp8 = runs["fp16"].run_dir, runs["fp8"].run_dir
        rules = self.rules(
            {"metric": "energy_per_output_token_j", "max_regression": "10%"},
            {"metric": "output_tokens_per_joule", "max_regression": "10%"},
            {"metric": "gpu_power_w", "max_ratio": 1.0},
        )
        better = gate(fp8, fp16, rules, allow_different=True)
        assert [(r.status, r.method) for r in better.results] == [("pass", "none")] * 3
        worse = gate(fp16, fp8, rules, allow_different=True)
        assert [r.status for r in worse.results] == ["fail", "fail", "fail"]
        r = worse.results[0]
        assert r.candidate == runs["fp16"].summary["telemetry"]["energy"]["j_per_output_token"]
        assert r.baseline == runs["fp8"].summary["telemetry"]["energy"]["j_per_output_token"]
        assert "not resampled" in r.message
        text = gate_markdown(worse)
        assert "GPU energy rules (summary.telemetry.energy" in text
        assert f"- `{r.label}`: {r.message}" in text

    @pytest.mark.slow
    def test_a_stage_rule_reads_the_stages_block(self, runs):
        d = runs["stages"].run_dir
        rules = self.rules({"metric": "gpu_power_w", "stage": "c=16", "min_ratio": 1.0})
        (r,) = gate(d, d, rules).results
        assert (r.status, r.stage) == ("pass", (1, "c=16"))
        assert r.candidate == runs["stages"].summary["stages"][1]["telemetry"]["energy"]["mean_watts"]

    @pytest.mark.slow
    def test_a_run_without_telemetry_cannot_be_judged_on_energy(self, runs):
        rules = self.rules({"metric": "energy_per_output_token_j", "max_regression": "10%"})
        (r,) = gate(runs["fp16"].run_dir, runs["none"].run_dir, rules, allow_different=True).results
        assert r.status == "error" and "baseline has no telemetry.energy.j_per_output_token" in r.message

    @pytest.mark.slow
    def test_compare_rows_for_telemetry(self, runs):
        names = ("energy_per_output_token_j", "energy_per_token_j", "output_tokens_per_joule", "gpu_power_w")
        c = loadgen.compare([runs["fp16"].run_dir, runs["fp8"].run_dir])
        for name, key in zip(
            names, ("j_per_output_token", "j_per_total_token", "output_tokens_per_j", "mean_watts")
        ):
            assert list(c.table.loc[name]) == [
                runs[k].summary["telemetry"]["energy"][key] for k in ("fp16", "fp8")
            ]
        assert c.relative.loc["energy_per_output_token_j"].iloc[1] < -0.3
        without = loadgen.compare([runs["none"].run_dir, runs["none"].run_dir])
        assert not set(names) & set(without.table.index)


class TestReport:
    @pytest.mark.slow
    def test_the_gpu_section_plot_and_electricity_beside_the_gpu_hour(self, runs, tmp_path):
        res = runs["fp16"]
        files = write_report(res.run_dir, tmp_path, gpu_hour_cost=2.5)
        assert "plots/gpu_telemetry.png" in files
        md = (tmp_path / "report.md").read_text()
        section = md.split("## GPU telemetry and energy", 1)[1].split("\n## ", 1)[0]
        energy = res.summary["telemetry"]["energy"]
        assert f"| joules per output token | {energy['j_per_output_token']:.3f} |" in section
        assert "![GPU telemetry](plots/gpu_telemetry.png)" in section
        cost = orjson.loads((tmp_path / "cost.json").read_bytes())
        assert cost["energy"] == {
            "price_per_kwh": 0.15,
            "kwh": energy["kwh"],
            "usd_per_million_output_tokens": energy["usd_per_million_output_tokens"],
            "usd_per_million_total_tokens": energy["usd_per_million_total_tokens"],
        }
        assert "Electricity at $0.15 per kWh" in md

    @pytest.mark.slow
    def test_a_run_without_sources_says_why_in_its_report(self, runs, tmp_path):
        write_report(runs["none"].run_dir, tmp_path)
        md = (tmp_path / "report.md").read_text()
        assert "Not measured: no telemetry sources configured (set telemetry.dcgm or telemetry.nvml" in md
        assert "GPU energy not measured (no telemetry sources configured" in md
