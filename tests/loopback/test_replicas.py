"""Several replicas, one run (``target.urls``), against simulator replicas of different GPUs on
loopback: each replica's figures follow its own physics (its ground-truth log says what it
served), the balancing policies split the load as they say, and a replica killed mid-run costs
only its own requests."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import RunError
from loadgen.records import CONNECT, NO_DONE, READ
from loadgen.sim import SimConfig, SimProcess

from helpers import LOADGEN, cli_env, profile, run

FAST, SLOW = "llama3-8b-fp16@h100", "llama3-8b-fp16@l40s"  # 3.35 against 0.864 TB/s of HBM


def _sim(preset: str, gt: Path) -> SimProcess:
    return SimProcess(SimConfig.from_dict({"preset": preset, "time_scale": 0.2}), ground_truth_path=gt)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """An H100 replica and an L40S replica, each logging its ground truth."""
    where = tmp_path_factory.mktemp("replicas")
    with _sim(FAST, where / "fast.jsonl") as fast, _sim(SLOW, where / "slow.jsonl") as slow:
        yield fast, slow, where


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _rows(res) -> list[dict]:
    return res.summary["replicas"]["by_replica"]


def _done(out: Path) -> int:
    """Records written so far by the one run under ``out``."""
    files = list(out.glob("*/requests.jsonl"))
    return files[0].read_bytes().count(b"\n") if files else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_round_robin_splits_evenly_and_each_tpot_follows_its_gpu(pair, tmp_path):
    """40 requests round robin over an H100 and an L40S: 20 each, every record names its
    replica, and each replica's client TPOT p50 is its own ground truth's, so the L40S's is
    higher by the ground truth's own ratio (about 3.5x at this batch)."""
    fast, slow, where = pair
    before = {k: len(_lines(where / f"{k}.jsonl")) for k in ("fast", "slow")}
    prof = profile(
        tmp_path,
        None,
        target__urls=[fast.url, slow.url],
        workload__num_requests=40,
        load__concurrency=4,
        workload__output_tokens=16,
    )
    res = run(prof)
    rows = _rows(res)
    assert [r["sent"] for r in rows] == [20, 20] and [r["ok"] for r in rows] == [20, 20]
    assert sorted(r.replica for r in res.records) == [0] * 20 + [1] * 20
    truth = {
        k: float(np.median([g["tpot_ms"] for g in _lines(where / f"{k}.jsonl")[before[k] :]]))
        for k in ("fast", "slow")
    }
    measured = {"fast": rows[0]["tpot_ms"]["p50"], "slow": rows[1]["tpot_ms"]["p50"]}
    print("tpot p50 measured", measured, "ground truth", truth)
    for k in truth:
        assert measured[k] == pytest.approx(truth[k], rel=0.05), (k, measured, truth)
    assert measured["slow"] / measured["fast"] == pytest.approx(truth["slow"] / truth["fast"], rel=0.05)
    assert measured["slow"] > 2 * measured["fast"]
    assert rows[0]["share"] == rows[1]["share"] == 0.5
    assert res.summary["counts"]["sent"] == sum(r["sent"] for r in rows)


@pytest.mark.slow
def test_least_in_flight_moves_load_away_from_the_slow_replica(pair, tmp_path):
    """The same load, least in flight: the L40S, slower to give its requests back, gets fewer
    than round robin's even half."""
    fast, slow, _ = pair
    prof = profile(
        tmp_path,
        None,
        target__urls=[fast.url, slow.url],
        target__balance="least_in_flight",
        workload__num_requests=40,
        load__concurrency=4,
        workload__output_tokens=16,
    )
    rows = _rows(run(prof))
    print("least_in_flight split", [r["sent"] for r in rows])
    assert rows[1]["sent"] < 20 < rows[0]["sent"], rows
    assert rows[0]["sent"] + rows[1]["sent"] == 40


@pytest.mark.slow
def test_session_affinity_keeps_each_session_on_one_replica(pair, tmp_path):
    """4 sessions of 3 turns, 2 at a time: every session's turns went to one replica, and the
    sessions are spread over both."""
    fast, slow, _ = pair
    prof = profile(
        tmp_path,
        None,
        target__urls=[fast.url, slow.url],
        target__balance="session_affinity",
        workload__num_requests=12,
        workload__sessions={"turns": 3, "think_time_s": 0.01},
    )
    res = run(prof)
    where: dict[int, set[int]] = {}
    for r in res.records:
        where.setdefault(r.session_id, set()).add(r.replica)
    assert len(where) >= 4 and all(len(v) == 1 for v in where.values()), where
    assert {next(iter(v)) for v in where.values()} == {0, 1}


def test_a_replica_down_at_the_start_stops_the_run_naming_it(pair, tmp_path):
    """Every replica is probed before the load: one that refuses is an error naming it."""
    fast, _, _ = pair
    dead = f"http://127.0.0.1:{_free_port()}"
    prof = profile(tmp_path, None, target__urls=[fast.url, dead])
    with pytest.raises(RunError, match=rf"replica 1 of target.urls \({dead}\) cannot be benchmarked"):
        run(prof)


@pytest.mark.slow
def test_a_replica_killed_mid_run_costs_only_its_own_requests(tmp_path):
    """Through the command line, --url twice, least in flight: the second replica is terminated
    once 100 of the run's 600 requests are done. Its in-flight requests fail (read, or no_done),
    its next ones as connect errors until it is out of rotation (3 in a row), then only its
    trials; the first serves the rest. The run completes, and with --fail-on-sla its error rate
    (over the 1 % default) exits 1."""
    with _sim(FAST, tmp_path / "a.jsonl") as keep, _sim(FAST, tmp_path / "b.jsonl") as victim:
        out = tmp_path / "reports"
        args = ["run", "ci-smoke", "--url", keep.url, "--url", victim.url, "--out", str(out)]
        args += ["--num-requests", "600", "--concurrency", "4", "--warmup", "0", "--output-tokens", "16"]
        args += ["--set", "target.balance=least_in_flight", "--fail-on-sla", "--no-report"]
        args += ["--set", 'sla.rules=["p99 ttft_ms < 100000"]', "--no-progress"]
        proc = subprocess.Popen(
            [*LOADGEN, *args],
            cwd=tmp_path,
            env=cli_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _done(out) < 100:
            time.sleep(0.02)
        victim._proc.terminate()  # type: ignore[union-attr]
        stdout, stderr = proc.communicate(timeout=120)
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert proc.returncode == 1, stderr
    assert summary["complete"] and summary["sla"]["verdict"] == "fail"
    first, second = summary["replicas"]["by_replica"]
    assert first["failed"] == 0 and first["ok"] == first["sent"]
    # In flight: read (reset) or no_done (the simulator ends its streams cleanly on SIGTERM).
    assert second["failed"] > 0 and set(second["errors_by_class"]) <= {CONNECT, READ, NO_DONE}, second
    assert second["errors_by_class"].get(CONNECT, 0) >= 3, second  # the next ones, till it was out
    # At most the 4 in flight (read), 3 to eject it, and a trial or two a second (connect).
    assert second["failed"] <= 4 + 3 + 6, second
    print(second["errors_by_class"], first["sent"], second["sent"])
    assert summary["counts"]["sent"] == 600 and summary["counts"]["ok"] == first["ok"] + second["ok"]
    assert "replica 0" in stdout and "replica 1" in stdout


@pytest.mark.slow
def test_worker_processes_each_balance_their_share(pair, tmp_path):
    """Two worker processes, round robin: each worker sends to both replicas (it balances its
    own share), and the even split holds over the run."""
    fast, slow, _ = pair
    prof = profile(
        tmp_path,
        None,
        target__urls=[fast.url, slow.url],
        workload__num_requests=40,
        load__concurrency=4,
        client__workers=2,
    )
    res = run(prof)
    assert [r["sent"] for r in _rows(res)] == [20, 20]
    assert {(r.worker, r.replica) for r in res.records} == {(0, 0), (0, 1), (1, 0), (1, 1)}


@pytest.mark.slow
def test_each_replicas_credentials_reach_no_file(pair, tmp_path):
    """Two replicas with a login each in their URLs: each is sent as its own Basic header, and
    neither password (nor its base64) is in any file of the run; the block names them redacted."""
    fast, slow, _ = pair
    urls = [
        u.replace("http://", f"http://{who}@")
        for u, who in ((fast.url, "al:pw-one-1234"), (slow.url, "bo:pw-two-5678"))
    ]
    res = run(profile(tmp_path, None, target__urls=urls, workload__num_requests=4))
    assert [r["url"].split("@")[0] for r in _rows(res)] == ["http://***", "http://***"]
    secrets = [
        "pw-one-1234",
        "pw-two-5678",
        *(base64.b64encode(w.encode()).decode() for w in ("al:pw-one-1234", "bo:pw-two-5678")),
    ]
    for f in res.run_dir.rglob("*"):
        if f.is_file():
            text = f.read_bytes().decode(errors="replace")
            assert not [s for s in secrets if s in text], f


@pytest.mark.slow
def test_compare_gives_each_replica_slot_beside_the_pool(pair, tmp_path):
    """Two runs over the same two replicas, the second with their order swapped: compare has
    each slot's rows, every cell is that run's replica row, and the slot that became the L40S
    shows the L40S's TPOT (the first run's slot 1 figure, not its own slot 0's)."""
    import loadgen
    from loadgen.report import compare as compare_report

    fast, slow, _ = pair
    runs = []
    for i, urls in enumerate(([fast.url, slow.url], [slow.url, fast.url])):
        prof = profile(
            tmp_path / str(i),
            None,
            target__urls=urls,
            workload__num_requests=40,
            load__concurrency=4,
            workload__output_tokens=16,
        )
        runs.append(run(prof))
    cmp = loadgen.compare([r.run_dir for r in runs])
    a, b = cmp.names
    for slot in (0, 1):
        for name, stat in (("share", ""), ("failed", ""), ("tpot_ms", "p50"), ("ttft_ms", "p99")):
            row = f"replica.{slot}.{name}" + (f" {stat}" if stat else "")
            for col, res in zip((a, b), runs, strict=True):
                want = _rows(res)[slot][name]
                assert cmp.table.at[row, col] == (want[stat] if stat else want), (row, col)
    tpot = cmp.table.loc["replica.0.tpot_ms p50"]
    assert tpot[b] > 2 * tpot[a]  # slot 0 went from the H100 to the L40S
    assert tpot[b] == pytest.approx(cmp.table.at["replica.1.tpot_ms p50", a], rel=0.1)
    assert cmp.relative.at["replica.0.tpot_ms p50", b] == pytest.approx(tpot[b] / tpot[a] - 1)
    md = compare_report.markdown(cmp)
    assert any(line.startswith("| replica.1.tpot_ms p99 | ") for line in md.splitlines())


@pytest.mark.slow
def test_the_server_view_is_the_first_replicas_and_says_so(pair, tmp_path):
    """Only the first replica's /metrics is scraped: the server block names it, its generation
    counter's delta is exactly the tokens replica 0's records streamed (not the pool's), and the
    report says so before the figures."""
    fast, slow, _ = pair
    prof = profile(
        tmp_path,
        None,
        target__urls=[fast.url, slow.url],
        workload__num_requests=24,
        load__concurrency=4,
        workload__output_tokens=16,
    )
    res = run(prof)
    server = res.summary["server"]
    assert server["available"] and server["replica"] == 0
    mine = sum(r.output_tokens or 0 for r in res.records if r.replica == 0 and r.ok)
    pooled = sum(r.output_tokens or 0 for r in res.records if r.ok)
    assert server["tokens"]["generation"] == mine < pooled
    from loadgen.report.server import server_section

    first = server_section(res.summary).blocks[0]
    assert first.text.startswith("Replica 0 only: loadgen scrapes the first replica's /metrics"), first


@pytest.mark.slow
def test_three_presets_each_follow_their_physics_and_one_killed_costs_only_its_own(tmp_path):
    """The issue's fleet: an H100, an A100 and an L40S replica, round robin, through the command
    line; the A100 is terminated once 90 of the 450 requests are done. Each replica's TPOT p50
    is its own ground truth's (so they order by HBM bandwidth: 3.35, 2.04, 0.864 TB/s), the
    killed one's failures are classed as a dead server's, the other two lost nothing, and the
    run completes with every request counted once."""
    presets = (FAST, "llama3-8b-fp16@a100", SLOW)
    logs = [tmp_path / f"{i}.jsonl" for i in range(3)]
    with (
        _sim(presets[0], logs[0]) as h100,
        _sim(presets[1], logs[1]) as a100,
        _sim(presets[2], logs[2]) as l40s,
    ):
        out = tmp_path / "reports"
        args = ["run", "ci-smoke", "--out", str(out), "--no-report", "--no-progress"]
        for s in (h100, a100, l40s):
            args += ["--url", s.url]
        args += ["--num-requests", "450", "--concurrency", "6", "--warmup", "0", "--output-tokens", "16"]
        proc = subprocess.Popen(
            [*LOADGEN, *args],
            cwd=tmp_path,
            env=cli_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _done(out) < 90:
            time.sleep(0.02)
        a100._proc.terminate()  # type: ignore[union-attr]
        stdout, stderr = proc.communicate(timeout=180)
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"], stderr
    rows = summary["replicas"]["by_replica"]
    assert [r["replica"] for r in rows] == [0, 1, 2]
    assert rows[0]["failed"] == rows[2]["failed"] == 0, rows
    assert rows[1]["failed"] > 0 and set(rows[1]["errors_by_class"]) <= {CONNECT, READ, NO_DONE}, rows[1]
    assert summary["counts"]["sent"] == 450 == sum(r["sent"] for r in rows)
    assert summary["counts"]["ok"] == sum(r["ok"] for r in rows)
    assert rows[0]["sent"] > rows[1]["sent"] and rows[2]["sent"] > rows[1]["sent"]  # the rest went on
    tpot = [r["tpot_ms"]["p50"] for r in rows]
    # (the killed replica's log ends with the streams it cut short: no TPOT)
    truth = [
        float(np.median([g["tpot_ms"] for g in _lines(log) if g["tpot_ms"] is not None])) for log in logs
    ]
    print("tpot p50 measured", tpot, "ground truth", truth, rows[1]["errors_by_class"])
    assert tpot == pytest.approx(truth, rel=0.05)
    assert tpot[0] < tpot[1] < tpot[2]
