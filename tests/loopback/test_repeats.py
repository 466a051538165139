"""Repeated runs over real sockets (``--repeats N``): N record sets in one folder, the interval
over the repeats, the gate on two repeated runs, the reset hook, and bad input.

The runs are made once for the module against the built-in simulator: a baseline and a second
run of the same preset, and the same pair's candidate with every repeat's server slowed by the
simulator's ``time_scale`` (1.5: every token 50 % later). Why every repeat and not one: the
gate judges a repeated candidate by Student/Welch t over the repeats, which is built so that one
odd repeat among three cannot fail it (``test_one_slowed_repeat_is_within_noise`` shows that
case passing, flagged); a server slowed in every repeat is a regression every repeat sees.
The decisions compare runs measured in this module, never a bare number of milliseconds.
"""

from __future__ import annotations

import math
import re
import shutil
import urllib.request
from pathlib import Path

import orjson
import pytest
from scipy import stats

from loadgen.analysis.gate import gate
from loadgen.config.gate_rules import GateRules
from loadgen.errors import RunError
from loadgen.result import RunResult, load_records
from loadgen.runner import repeats
from loadgen.sim import SimConfig, SimProcess

from helpers import cli, profile, run

PRESET = "llama3-8b-fp16@h100"
N, REQUESTS = 3, 12
RULES = GateRules.model_validate(
    {
        "rules": [
            {"metric": "tpot_ms", "stat": "p50", "max_regression": "10%"},
            {"metric": "e2e_ms", "stat": "p50", "max_regression": "10%"},
            {"metric": "output_tokens_per_s", "max_regression": "10%"},
        ]
    }
)


def repeated(out: Path, run_id: str, time_scale: float = 1.0, **kw):
    """A profile of N repeats of 12 requests at c=4 against a fresh simulator each."""
    return profile(
        out,
        None,
        sim={"preset": PRESET, "time_scale": time_scale, "seed": 1},
        load__repeats=N,
        load__concurrency=4,
        workload__num_requests=REQUESTS,
        workload__output_tokens=16,
        output__run_id=run_id,
        **kw,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: RunResult}: baseline, same (the same preset again) and slowed (time_scale 1.5)."""
    out = tmp_path_factory.mktemp("repeats")
    made = {}
    for name, scale in (("baseline", 1.0), ("same", 1.0), ("slowed", 1.5)):
        made[name] = run(repeated(out, name, scale))
    return made


@pytest.mark.slow
class TestFolder:
    @pytest.mark.slow
    def test_n_record_sets_in_one_folder(self, runs):
        """Each repeat is a full run folder with its 12 records (ids 0-11, the same schedule);
        the parent's requests.jsonl holds all 36, repeat after repeat, and counts them."""
        res = runs["baseline"]
        folders = sorted(p.name for p in res.run_dir.iterdir() if p.is_dir() and p.name.startswith("repeat"))
        assert folders == ["repeat-1", "repeat-2", "repeat-3"]
        for k in range(1, N + 1):
            recs = load_records(res.run_dir / f"repeat-{k}")
            assert sorted(r.id for r in recs) == list(range(REQUESTS))
            assert RunResult.load(res.run_dir / f"repeat-{k}").summary["counts"]["ok"] == REQUESTS
        assert len(load_records(res.run_dir)) == N * REQUESTS
        s = res.summary
        assert (s["counts"]["sent"], s["counts"]["ok"], s["complete"]) == (N * REQUESTS, N * REQUESTS, True)
        assert [r["path"] for r in s["repeats"]["runs"]] == folders
        assert s["repeats"]["completed"] == N

    @pytest.mark.slow
    def test_rates_are_per_second_of_the_repeats_windows(self, runs):
        """The parent's window is the repeats' windows summed (the gaps between them left
        out), and its throughput the ok requests over it."""
        res = runs["baseline"]
        subs = [RunResult.load(res.run_dir / f"repeat-{k}").summary for k in range(1, N + 1)]
        seconds = sum(s["window"]["seconds"] for s in subs)
        assert res.summary["window"]["seconds"] == pytest.approx(seconds)
        assert res.summary["metrics"]["request_throughput_rps"] == pytest.approx(N * REQUESTS / seconds)

    @pytest.mark.slow
    def test_saved_summary_loads_and_reports(self, runs, tmp_path):
        """The parent's summary.json passes the schema check; `loadgen report` renders the
        figures over repeats in both reports."""
        loaded = RunResult.load(runs["baseline"].run_dir)
        assert loaded.summary["repeats"]["count"] == N
        done = cli("report", str(runs["baseline"].run_dir), "--out", str(tmp_path))
        assert done.returncode == 0, done.stderr
        md = (tmp_path / "report.md").read_text()
        assert "| figure | repeat-1 | repeat-2 | repeat-3 | mean | sd | 95% interval |" in md
        assert "repeat-3" in (tmp_path / "report.html").read_text()


@pytest.mark.slow
def test_interval_is_the_t_interval_of_the_repeats_own_summaries(runs):
    """Every headline figure's mean, sd and 95 % interval equal Student t (scipy) over the
    values read from each repeat's own summary.json."""
    res = runs["baseline"]
    subs = [
        orjson.loads((res.run_dir / f"repeat-{k}" / "summary.json").read_bytes()) for k in range(1, N + 1)
    ]
    for fig in res.summary["repeats"]["figures"]:
        node = [s["metrics"] if fig["metric"] != "error_rate" else s["counts"] for s in subs]
        key = {"goodput_rps": ("goodput", "requests_per_s")}.get(fig["metric"], (fig["metric"],))
        values = []
        for n in node:
            for part in key:
                n = n[part]
            values.append(n[fig["stat"]] if fig["stat"] else n)
        assert fig["values"] == values, fig["figure"]
        mean, sd = sum(values) / N, stats.tstd(values)
        half = stats.t.ppf(0.975, N - 1) * sd / math.sqrt(N)
        assert (fig["mean"], fig["sd"]) == (pytest.approx(mean), pytest.approx(sd)), fig["figure"]
        assert (fig["low"], fig["high"]) == (pytest.approx(mean - half), pytest.approx(mean + half))


class TestGate:
    @pytest.mark.slow
    def test_same_preset_passes(self, runs):
        """Two repeated runs of the same preset: exit 0, every rule judged on the repeats."""
        res = gate(runs["same"].run_dir, runs["baseline"].run_dir, RULES)
        assert res.exit_code == 0, [r.message for r in res.results]
        assert {r.method for r in res.results} == {"repeats"}
        assert all("Welch t over the repeats (3 candidate, 3 baseline" in r.message for r in res.results)

    @pytest.mark.slow
    def test_slowed_server_fails(self, runs):
        """The same pair with the candidate's server slowed 1.5x in its repeats: exit 1, the
        TPOT and E2E rules' whole intervals past +10 %."""
        res = gate(runs["slowed"].run_dir, runs["baseline"].run_dir, RULES)
        assert res.exit_code == 1
        by = {r.rule.metric: r for r in res.results}
        for metric in ("tpot_ms", "e2e_ms"):
            assert by[metric].status == "fail" and by[metric].interval.low > 1.1, by[metric].message

    @pytest.mark.slow
    def test_cli_exit_codes_and_the_interval_named(self, runs, tmp_path):
        """`loadgen gate` exits 0 and 1 on the two pairs and says which interval it used."""
        rules = tmp_path / "rules.yaml"
        rules.write_text("rules:\n  - {metric: tpot_ms, stat: p50, max_regression: 10%}\n")
        base = str(runs["baseline"].run_dir)
        ok = cli("gate", str(runs["same"].run_dir), "--baseline", base, "--rules", str(rules))
        bad = cli("gate", str(runs["slowed"].run_dir), "--baseline", base, "--rules", str(rules))
        assert (ok.returncode, bad.returncode) == (0, 1), ok.stdout + bad.stdout
        assert "Judged on the repeats' spread" in ok.stdout and "Welch t over the repeats" in bad.stdout

    @pytest.mark.slow
    def test_one_slowed_repeat_is_within_noise(self, runs, tmp_path):
        """The candidate's third repeat replaced by a slowed one: the mean moves past the bound
        but one repeat in three is noise to a t interval: pass, flagged within noise."""
        parent = tmp_path / "mixed"
        parent.mkdir()
        for k, src in (
            (1, runs["same"].run_dir / "repeat-1"),
            (2, runs["same"].run_dir / "repeat-2"),
            (3, runs["slowed"].run_dir / "repeat-1"),
        ):
            shutil.copytree(src, parent / f"repeat-{k}")
        done = [RunResult.load(parent / f"repeat-{k}") for k in range(1, N + 1)]
        prof = repeated(tmp_path, "mixed")
        repeats.pooled_summary(parent, prof, done, repeats.headline_figures)
        rule = GateRules.model_validate(
            {"rules": [{"metric": "tpot_ms", "stat": "p50", "max_regression": "10%"}]}
        )
        res = gate(parent, runs["baseline"].run_dir, rule)
        (r,) = res.results
        assert (res.exit_code, r.within_noise) == (0, True), r.message
        assert r.interval.estimate > 1.1


@pytest.mark.slow
def test_console_shows_the_figures_over_repeats(tmp_path):
    """`loadgen run --repeats 2` prints each headline figure per repeat, and no interval: with
    t(1) = 12.7 two repeats bound nothing (a loaded machine's spread took the low end below 0)."""
    done = cli(
        "run",
        "--sim",
        PRESET,
        "--num-requests",
        "4",
        "--concurrency",
        "2",
        "--input-tokens",
        "32",
        "--output-tokens",
        "8",
        "--repeats",
        "2",
        "--out",
        str(tmp_path),
        "--no-report",
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    assert "over 2 of 2 repeats" in done.stdout
    assert re.search(r"p99 ttft_ms .* too few repeats to bound", done.stdout), done.stdout


class TestResetHook:
    @pytest.mark.slow
    def test_called_once_per_repeat(self, tmp_path):
        """Against one simulator, 3 repeats with the hook, then a run with a list of two hooks
        (SGLang's name, sent as GET): its reset counter reads 3 + 2."""
        with SimProcess(SimConfig.from_dict({"preset": PRESET, "time_scale": 0.2})) as sim:
            prof = profile(tmp_path, sim.url, load__repeats=3, target__reset_path="/reset_prefix_cache")
            run(prof)
            hooks = ["/reset_prefix_cache", "GET /flush_cache"]
            res = run(profile(tmp_path, sim.url, target__reset_path=hooks))
            with urllib.request.urlopen(sim.url + "/metrics") as r:
                text = r.read().decode()
        assert re.search(r"^loadgen_sim_cache_resets_total\{[^}]*\} 5$", text, re.M), text[-300:]
        said = res.summary["conditions"]["profile"]["target"]["reset_path"]
        assert said == ["POST /reset_prefix_cache", "GET /flush_cache"]

    def test_a_failing_reset_names_the_path_and_status(self, tmp_path):
        """A path the server does not serve stops the run before any load, naming both."""
        prof = profile(tmp_path, None, sim={"preset": PRESET}, target__reset_path="/no_such_reset")
        with pytest.raises(RunError, match=r"POST /no_such_reset .* answered HTTP 404"):
            run(prof)


class TestBadInput:
    @pytest.mark.parametrize(
        ("args", "said"),
        [
            (["--repeats", "0"], "argument --repeats: 0 repeats: at least 1"),
            (["--repeats", "2.5"], "argument --repeats: '2.5' is not a whole number"),
            (["--reset-path", "flush"], "target.reset_path: 'flush' is not a reset hook"),
            (["--reset-path", "PUT /flush_cache"], "'PUT /flush_cache' is not a reset hook"),
        ],
    )
    def test_one_line_error_naming_the_flag(self, args, said, tmp_path):
        """Exit 2, the field or flag named, no traceback."""
        done = cli("run", "--sim", PRESET, "--num-requests", "2", "--out", str(tmp_path), *args)
        assert done.returncode == 2
        assert said in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_capacity_repeats_give_capacity_over_the_searches(tmp_path):
    """`capacity --repeats 2`: two searches in repeat-1/ and repeat-2/, capacity_rps of each in
    the repeats block, and the run's capacity (capacity.json too) their mean with that interval."""
    import asyncio

    from loadgen.runner.capacity_repeats import run_capacity_repeated

    prof = profile(
        tmp_path,
        None,
        sim={"preset": "llama2-7b-fp16@l40s", "time_scale": 0.25},
        load__repeats=2,
        load__concurrency=None,
        load__rate=10.0,
        workload__num_requests=None,
        workload__duration_s=10.0,
    )
    res = asyncio.run(
        run_capacity_repeated(
            prof,
            attainment=0.9,
            slos={"ttft_ms": 500.0},
            stage_s=1.0,
            warmup_s=0.2,
            max_stages=2,
            confirm_s=5.0,
            twin="off",
        )
    )
    fig = res.summary["repeats"]["figures"][0]
    each = [RunResult.load(res.run_dir / f"repeat-{k}").summary["capacity"]["capacity_rps"] for k in (1, 2)]
    assert (fig["figure"], fig["values"]) == ("capacity_rps", each)
    saved = orjson.loads((res.run_dir / "capacity.json").read_bytes())
    assert saved["capacity_rps"] == res.capacity["capacity_rps"] == pytest.approx(sum(each) / 2)
    # Two searches bound nothing (t(1) = 12.7): no interval, and the method says why.
    assert fig["low"] is not None and saved["ci95"] == [None, None]
    assert "95% CI: none, too few repeats to bound" in saved["method"]
