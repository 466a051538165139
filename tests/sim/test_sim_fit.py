"""``loadgen sim fit``: a real sweep of the simulator with known efficiencies is fitted back
from its run folder; sweeps that cannot identify a parameter are refused naming it; and
``loadgen sim --preset-file`` serves the fitted twin."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
import yaml

from loadgen.analysis import sim_fit
from loadgen.cli.main import main
from loadgen.result import GROUND_TRUTH
from loadgen.sim import SimConfig, SimConfigError

import helpers

TRUTH = {"bandwidth_efficiency": 0.6, "flops_efficiency": 0.45, "step_overhead_ms": 1.5}
PRESET = "llama3-8b-fp16@h100"
CPU = "tiny-llama-bf16@cpu"  # the integration suite's model on this machine's cores
LATENCY_MS = 0.5  # the synthetic stages' client-to-engine latency


def synthetic(
    name: str, c: int, n: int, isl: int, osl: int, truth: dict, warmup: int = 0
) -> sim_fit.FitStage:
    """A closed-loop stage of ``n`` (isl, osl) requests, its users' first sent at once, measured
    as the simulator of ``truth`` serves it (the replay is the fit's own predictor)."""
    warm = np.arange(n) < warmup
    stage = sim_fit.FitStage(
        name, c, np.full(n, isl), np.full(n, osl), np.zeros(n, dtype=np.int64), warm, {}, opens=c
    )
    return dataclasses.replace(stage, measured=sim_fit.predict(truth, stage, LATENCY_MS))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Four closed-loop stages (c = 1, 8, 32, 64) of 2048-token prompts and 128-token answers,
    3 s each in slow motion (time_scale 2: the client's and the pacing's own jitter count half
    against a simulated 1.5 ms step overhead), on a simulator with the TRUTH efficiencies (no
    prefix cache: the stages repeat their prompts)."""
    out = tmp_path_factory.mktemp("fit")
    profile = helpers.profile(
        out,
        None,
        **{
            "workload.num_requests": None,
            "load.concurrency": None,
            "workload.input_tokens": 2048,
            "workload.output_tokens": 128,
            "target.endpoint": "completions",
            "target.ignore_eos": True,
            "load.sweep": {"concurrency": [1, 8, 32, 64], "stage_duration_s": 3, "ramp_s": 0},
            "sim": {"preset": PRESET, "prefix_caching": False, "time_scale": 2.0, **TRUTH},
        },
    )
    return helpers.run(profile).run_dir


@pytest.fixture(scope="module")
def served(sweep, tmp_path_factory):
    """The same sweep as the simulator's own log has it: a copy of the run folder whose records
    carry the server's stamps (arrival, first and last chunk written, finish) in place of the
    client's, on the one monotonic clock both read. Its fit is what the server did; on a loaded
    core that drifts from TRUTH (the pacing's late wake-ups land in the served TTFTs: a step
    overhead of 1.447 ms under two CPU hogs, 1.588 ms on a busy CI host), and it is the
    reference a fit of loadgen's records has to meet."""
    truth = {}
    for line in (sweep / GROUND_TRUTH).read_bytes().splitlines():
        row = json.loads(line)
        truth[row["id"]] = row
    copy = tmp_path_factory.mktemp("served") / sweep.name
    shutil.copytree(sweep, copy)
    lines, replaced, answered = [], 0, 0
    for line in (sweep / "requests.jsonl").read_text().splitlines():
        record = json.loads(line)
        answered += bool(record["ok"])
        server = truth.get(record.get("response_id"))
        if record.get("t_first_token_ns") is not None and server and server.get("chunk_ns"):
            record["t_send_ns"], record["t_end_ns"] = server["arrival_ns"], server["finish_ns"]
            chunks = server["chunk_ns"]
            record["t_first_token_ns"], record["t_last_chunk_ns"] = chunks[0], chunks[-1]
            replaced += 1
        lines.append(json.dumps(record))
    (copy / "requests.jsonl").write_text("\n".join(lines) + "\n")
    assert replaced == answered > 0  # every answered request matched in the server's log
    return sim_fit.fit(sim_fit.read_run(copy))


@pytest.mark.slow
@pytest.mark.serial  # a real-time sweep: a 1.5 ms step overhead, which a loaded core blurs
def test_fit_recovers_what_the_simulator_served(sweep, served):
    """Each parameter fitted from loadgen's records within 2 % of the fit of the server's own
    log of the same requests (0.2 % idle, 0.6 % under two CPU hogs); the efficiencies within
    5 % of those the simulator ran with (the step overhead is held to the log alone: its
    served value is what a loaded core's pacing made of it). The base preset and its other
    settings come from the run's own conditions."""
    fitted = sim_fit.fit(sim_fit.read_run(sweep))
    assert fitted.source.base == {"preset": PRESET, "prefix_caching": False}
    assert [s.name for s in fitted.source.stages] == ["c=1", "c=8", "c=32", "c=64"]
    for name in TRUTH:
        assert fitted.params[name] == pytest.approx(served.params[name], rel=0.02), name
    for name in ("bandwidth_efficiency", "flops_efficiency"):
        assert fitted.params[name] == pytest.approx(TRUTH[name], rel=0.05), name
    assert max(abs(r) for row in fitted.residuals_pct() for r in row.values()) < 5.0


@pytest.mark.slow
@pytest.mark.serial  # a real-time sweep: a 1.5 ms step overhead, which a loaded core blurs
def test_cli_prints_the_residual_table_and_writes_the_preset_file(sweep, tmp_path, capsys):
    """One row a stage with measured, predicted and residual of each metric; the file holds the
    fitted fields (the library's fit of the same folder, to the file's six decimals) and a fit:
    block with the same residuals."""
    path = tmp_path / "fitted.yaml"
    assert main(["sim", "fit", str(sweep), "--preset-file", str(path)]) == 0
    printed = capsys.readouterr().out
    for header in ("TTFT p50 meas", "TTFT p99 meas", "TPOT p50 meas", "out tok/s meas"):
        assert header in printed
    rows = [line for line in printed.splitlines() if re.match(r"c=\d+ ", line)]
    assert [r.split()[:4] for r in rows] == [[f"c={c}", f"c={c}", "2048", "128"] for c in (1, 8, 32, 64)]
    # The nuisance latency in ms to the microsecond (a fit on its bound of 0 printed "2e-12").
    assert re.search(r"^  request_latency_ms +\d+\.\d{3}   \(client-to-engine", printed, re.M), printed
    doc = yaml.safe_load(path.read_text())
    assert doc["preset"] == PRESET
    fitted = sim_fit.fit(sim_fit.read_run(sweep))
    for name in TRUTH:
        assert doc[name] == pytest.approx(fitted.params[name], abs=1e-6), name
    assert [s["stage"] for s in doc["fit"]["stages"]] == ["c=1", "c=8", "c=32", "c=64"]
    for row, stage in zip(rows, doc["fit"]["stages"]):
        printed_pct = float(row.split()[6].rstrip("%"))  # one decimal; the file keeps two
        assert abs(printed_pct - stage["residual_pct"]["ttft_p50_ms"]) <= 0.051
    assert SimConfig.from_dict({"preset_file": str(path)}).bandwidth_efficiency == doc["bandwidth_efficiency"]


@pytest.mark.slow
def test_loadgen_sim_preset_file_serves_the_twin(sweep, tmp_path):
    """`loadgen sim --preset-file F --set max_num_seqs=64`: /sim/info shows the fitted
    efficiencies and the what-if the command line added."""
    path = tmp_path / "fitted.yaml"
    fitted = sim_fit.fit(sim_fit.read_run(sweep))
    path.write_text(yaml.safe_dump(fitted.document()))
    cmd = [sys.executable, "-m", "loadgen", "sim", "--preset-file", str(path), "--port", "0"]
    proc = subprocess.Popen([*cmd, "--set", "max_num_seqs=64"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"on (http://\S+)", line)
        assert url, line
        with urllib.request.urlopen(f"{url[1]}/sim/info", timeout=10) as resp:
            info = json.loads(resp.read())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    config = info["config"]
    assert config["preset_file"] == str(path)
    assert config["max_num_seqs"] == 64
    for name in TRUTH:
        assert config[name] == round(fitted.params[name], 6)


@pytest.mark.slow
def test_a_single_stage_run_keeps_what_it_cannot_pin_and_names_it(tmp_path, capsys):
    """One closed-loop stage cannot separate the step overhead from the bandwidth: asked by
    name, the fit refuses naming it and what would pin it; by default (the CLI's) it keeps the
    preset's value, says so, and fits the rest."""
    lengths = {"workload.num_requests": 40, "workload.input_tokens": 512, "workload.output_tokens": 64}
    res = helpers.run(helpers.profile(tmp_path, None, **lengths, sim={"time_scale": 0.5}))
    source = sim_fit.read_run(res.run_dir)
    with pytest.raises(
        sim_fit.FitError, match=r"do not identify .*step_overhead_ms moves them [\d.e-]+, add"
    ):
        sim_fit.fit(source)
    path = tmp_path / "twin.yaml"
    assert main(["sim", "fit", str(res.run_dir), "--preset-file", str(path)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"step_overhead_ms +kept at the preset's 1: these stages do not identify it", printed)
    doc = yaml.safe_load(path.read_text())
    assert "step_overhead_ms" not in doc and "step_overhead_ms" in doc["fit"]["not_identified"]


@pytest.mark.slow
def test_a_fit_its_twin_cannot_reproduce_is_rejected_and_nothing_written(tmp_path, capsys):
    """A server with 4 sequences a step (max_num_seqs: 4) fitted as the preset's 256: at c=16
    its requests queue, which no efficiency reproduces; exit 1, the residuals printed, no file."""
    sweep = {"concurrency": [1, 4, 16], "stage_duration_s": 2, "ramp_s": 0}
    profile = helpers.profile(
        tmp_path,
        None,
        **{"workload.num_requests": None, "load.concurrency": None, "load.sweep": sweep},
        sim={"time_scale": 0.5, "max_num_seqs": 4},
    )
    run_dir = helpers.run(profile).run_dir
    path = tmp_path / "twin.yaml"
    argv = ["sim", "fit", str(run_dir), "--set", "max_num_seqs=256", "--preset-file", str(path)]
    assert main(argv) == 1
    printed = capsys.readouterr().out
    assert re.search(r"^c=16 +c=16 ", printed, re.M), printed
    assert re.search(
        r"loadgen: rejected: the fitted twin misses c=\d+'s \w+ by [+-][\d.]+ % \([\d.]+ of its spreads\)",
        printed,
    )
    assert "(nothing written)" in printed and not path.exists()


def test_a_decode_bound_sweep_is_refused_naming_flops_efficiency():
    """16-token prompts: every step reads weights longer than it computes, so flops_efficiency
    never moves a prediction, and the refusal says what stage would pin it."""
    truth = {"preset": PRESET, **TRUTH}
    stages = [synthetic(f"c={c}", c, 2 * c, 16, 64, truth) for c in (1, 4, 16)]
    source = sim_fit.FitInput("synthetic", None, {"preset": PRESET}, stages, [], None)
    with pytest.raises(sim_fit.FitError, match=r"do not identify .*flops_efficiency") as refused:
        sim_fit.fit(source)
    assert re.search(r"flops_efficiency moves them [\d.e-]+, add a compute-bound", str(refused.value))


def test_warm_up_requests_are_served_and_left_out_as_a_run_leaves_them_out():
    """A stage that began with 8 warm-up requests (load.warmup_requests) is predicted with them
    sent first and left out of its figures, as the summary leaves them out: at c=32 its
    throughput window starts after the cold start, 5 % and more from a stage without them; at
    c=1 they change nothing (each request runs alone either way)."""
    truth = {"preset": PRESET, **TRUTH}

    def both(c: int, n: int) -> tuple[dict[str, float], dict[str, float]]:
        warm = synthetic("s", c, n + 8, 2048, 128, truth, warmup=8).measured
        return warm, synthetic("s", c, n, 2048, 128, truth).measured

    warm, cold = both(32, 96)
    assert abs(warm["output_tokens_per_s"] / cold["output_tokens_per_s"] - 1) > 0.05
    warm, cold = both(1, 3)
    assert warm == pytest.approx(cold, rel=1e-9)


@pytest.mark.slow
def test_open_loop_stages_are_replayed_at_their_send_times_and_fitted(tmp_path):
    """A capacity search's kind of run: Poisson stages at 4 and 40 req/s (virtual) of
    1024-token prompts, on a simulator with the TRUTH efficiencies, in slow motion as the
    sweep's. Each is replayed at its own send times: the twin reproduces every figure within
    the rejection bound, and the bandwidth, which the TPOT of both loads pins, comes back
    within 5 %."""
    stages = [{"rate": r, "duration_s": 8} for r in (2, 20)]  # x time_scale 2: 4 and 40
    profile = helpers.profile(
        tmp_path,
        None,
        **{
            "workload.num_requests": None,
            "load.concurrency": None,
            "load.stages": stages,
            "workload.input_tokens": 1024,
            "workload.output_tokens": 128,
            "target.endpoint": "completions",
            "target.ignore_eos": True,
        },
        sim={"preset": PRESET, "prefix_caching": False, "time_scale": 2.0, **TRUTH},
    )
    source = sim_fit.read_run(helpers.run(profile).run_dir)
    assert [s.load for s in source.stages] == ["open", "open"] and source.skipped == []
    fitted = sim_fit.fit(source, drop_weak=True)
    assert fitted.max_residual_pct() <= sim_fit.MAX_RESIDUAL_PCT
    assert fitted.params["bandwidth_efficiency"] == pytest.approx(TRUTH["bandwidth_efficiency"], rel=0.05)


def test_an_unknown_preset_is_refused_with_where_to_find_the_names(tmp_path):
    res = helpers.run(helpers.profile(tmp_path, None, sim={"time_scale": 0.05}))
    with pytest.raises(sim_fit.FitError, match=r"unknown model 'nope'.*loadgen sim --help"):
        sim_fit.read_run(res.run_dir, preset="nope-fp16@h100")


def test_a_missing_preset_file_is_a_clear_error(tmp_path):
    with pytest.raises(SimConfigError, match=r"^sim.preset_file: cannot read .*missing.yaml"):
        SimConfig.from_dict({"preset_file": str(tmp_path / "missing.yaml")})


def test_a_preset_file_sets_defaults_under_the_sections_own_fields(tmp_path):
    """The file's fields are defaults: the section's own win; its fit: block is not a field."""
    path = tmp_path / "twin.yaml"
    path.write_text(
        "preset: llama3-8b-fp16@a100\nstep_overhead_ms: 2.5\nnum_gpu_blocks: 3000\nfit: {run: x}\n"
    )
    config = SimConfig.from_dict({"preset_file": str(path), "step_overhead_ms": 4.0})
    assert (config.preset, config.step_overhead_ms, config.num_blocks) == ("llama3-8b-fp16@a100", 4.0, 3000)


def test_an_experiments_preset_file_is_read_beside_the_experiment_file(tmp_path):
    """`sim: {preset_file: twin.yaml, max_num_seqs: 512}` in an experiment: the file beside the
    experiment (as a profile's paths are beside the profile), the what-if on top."""
    from loadgen.experiment.cell import profile_for
    from loadgen.experiment.cells import configs
    from loadgen.experiment.spec import parse

    (tmp_path / "twin.yaml").write_text("preset: llama3-8b-fp16@a100\nstep_overhead_ms: 2.5\n")
    exp = parse(
        {
            "name": "t",
            "load": {"sweep": {"concurrency": [1, 2], "stage_duration_s": 1}},
            "sla": {"ttft_ms": 700},
            "backends": [{"name": "twin", "sim": {"preset_file": "twin.yaml", "max_num_seqs": 512}}],
        }
    )
    profile = profile_for(exp, tmp_path / "exp.yaml", configs(exp)[0], 1, tmp_path / "out")
    assert profile.sim == {"preset_file": str(tmp_path / "twin.yaml"), "max_num_seqs": 512}
    config = SimConfig.from_dict(dict(profile.sim))
    assert (config.preset, config.step_overhead_ms, config.max_num_seqs) == ("llama3-8b-fp16@a100", 2.5, 512)


def test_without_scipy_the_fit_names_the_extra(monkeypatch):
    """scipy is the fit extra's: without it, the error says what to install."""
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    source = sim_fit.FitInput("r", None, {"preset": PRESET}, [], [], None)
    with pytest.raises(sim_fit.FitError, match=r"needs scipy: pip install 'loadgen\[fit\]'"):
        sim_fit.fit(source)


def test_a_real_servers_kv_blocks_are_read_not_fitted(tmp_path):
    """A run of a real server (no builtin_simulator) whose /metrics carried vLLM's
    cache_config_info: the base is --preset plus the reported blocks, and the fit says so."""
    run_dir = helpers.run(helpers.profile(tmp_path, None, sim={"time_scale": 0.05})).run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["conditions"]["target"].pop("builtin_simulator")
    summary["conditions"]["server"]["metrics_labels"]["info"] = {
        "vllm:cache_config_info": {"num_gpu_blocks": "4096", "block_size": "16", "cache_dtype": "auto"}
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(sim_fit.FitError, match=r"a real server's run: name the simulator preset"):
        sim_fit.read_run(run_dir)
    source = sim_fit.read_run(run_dir, preset="llama3-8b-bf16@a100")
    assert source.base == {"preset": "llama3-8b-bf16@a100", "num_gpu_blocks": 4096, "block_size": 16}
    assert source.kv_source == (
        "read, not fitted: 4096 blocks of 16 tokens from the server's vllm:cache_config_info"
    )


@pytest.mark.slow
def test_a_cost_per_sequence_is_fitted_when_asked_and_fixed_parameters_keep_their_defaults():
    """A synthetic sweep of the CPU twin the integration suite fits (the real vLLM's figures:
    FLOP/s 4.5 %, 9.3 ms a step, 1.4 ms a sequence, a 2048-token budget): --params with
    seq_overhead_ms gives the three back within 5 %, bandwidth staying at the preset's default;
    the default three refuse it (no step cost and bandwidth of theirs makes a cost per
    sequence), naming what these stages do not identify."""
    server = {"max_num_batched_tokens": 2048}
    truth = {
        "preset": CPU,
        **server,
        "flops_efficiency": 0.045,
        "step_overhead_ms": 9.3,
        "seq_overhead_ms": 1.4,
    }
    stages = [synthetic(f"c={c}", c, 3 * c, 512, 64, truth) for c in (1, 2, 4, 8)]
    source = sim_fit.FitInput("synthetic", None, {"preset": CPU, **server}, stages, [], None)
    names = ("flops_efficiency", "step_overhead_ms", "seq_overhead_ms")
    fitted = sim_fit.fit(source, names)
    assert set(fitted.params) == set(names) and "bandwidth_efficiency" not in fitted.config_fields()
    for name in names:
        assert fitted.params[name] == pytest.approx(truth[name], rel=0.05), name
    with pytest.raises(sim_fit.FitError, match=r"do not identify .*leave it out of --params"):
        sim_fit.fit(source)


def test_settings_the_run_cannot_record_are_given_and_checked(tmp_path):
    """--set gives the twin the server's scheduler; a fitted parameter or a bad value is refused
    naming the field (checked as the run folder is read: any run's folder will do)."""
    lengths = {"workload.num_requests": 8, "workload.input_tokens": 256, "workload.output_tokens": 16}
    sweep = helpers.run(helpers.profile(tmp_path, None, **lengths, sim={"time_scale": 0.5})).run_dir
    source = sim_fit.read_run(sweep, settings={"max_num_batched_tokens": 2048, "kv_allocation": "on_demand"})
    assert source.base["max_num_batched_tokens"] == 2048 and source.base["kv_allocation"] == "on_demand"
    with pytest.raises(sim_fit.FitError, match=r"--set step_overhead_ms: the fit sets it"):
        sim_fit.read_run(sweep, settings={"step_overhead_ms": 2.0})
    with pytest.raises(sim_fit.FitError, match=r"sim\.max_num_seqs: Input should be greater than 0"):
        sim_fit.read_run(sweep, settings={"max_num_seqs": 0})
    with pytest.raises(
        sim_fit.FitError, match=r"--params: cannot fit \['bandwidth'\]; valid: bandwidth_efficiency"
    ):
        sim_fit.fit(source, ("bandwidth",))
