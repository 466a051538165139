"""A repeated run's pooled summary keeps every block its repeats have: the simulator's fidelity
and the server's view (pooled from the repeats' own blocks), quality and sessions (from the
pooled records); and a staged run (a sweep) repeats whole, stage i of the parent pooling stage i
of each repeat.

Each figure is checked against the repeats' own summaries, written by the same run."""

from __future__ import annotations

import pytest

from loadgen.result import RunResult, load_records

from helpers import profile, run

PRESET = "llama3-8b-fp16@h100"
N = 2


def repeated(out, **kw):
    """The run of N repeats of ``kw``'s load on a seeded simulator, 8 output tokens a request."""
    return run(
        profile(
            out, None, sim={"preset": PRESET, "seed": 1}, load__repeats=N, workload__output_tokens=8, **kw
        )
    )


def repeat_summaries(res) -> list[dict]:
    return [RunResult.load(res.run_dir / f"repeat-{k}").summary for k in range(1, N + 1)]


@pytest.fixture(scope="module")
def sessions_run(tmp_path_factory):
    """Two repeats of 12 turns in sessions of 2-3 turns (answers kept) on the simulator."""
    return repeated(
        tmp_path_factory.mktemp("blocks"),
        load__concurrency=3,
        workload__num_requests=12,
        workload__sessions={"turns": {"kind": "uniform", "min": 2, "max": 3}, "think_time_s": 0.02},
        output__answers={"keep": True},
    )


@pytest.mark.slow
def test_fidelity_counts_are_the_repeats_summed(sessions_run):
    """Each repeat met its own simulator's log; the parent's fidelity block counts them all and
    keeps the worst chunk lag of theirs."""
    each = repeat_summaries(sessions_run)
    fid = sessions_run.summary["fidelity"]
    for key in ("requests_matched", "requests_unmatched", "chunks_matched"):
        assert fid[key] == sum(s["fidelity"][key] for s in each), key
    assert fid["requests_matched"] == 2 * 12
    assert fid["first_token_lag_ms"]["count"] == sum(
        s["fidelity"]["first_token_lag_ms"]["count"] for s in each
    )
    lags = [s["fidelity"]["chunk_lag_ms"]["max"] for s in each]
    assert fid["chunk_lag_ms"]["max"] == pytest.approx(max(lags))


@pytest.mark.slow
def test_server_view_is_kept(sessions_run):
    """The simulator's /metrics was scraped in each repeat: the parent says so, with the scrapes
    of both."""
    each = repeat_summaries(sessions_run)
    server = sessions_run.summary["server"]
    assert server["available"] and all(s["server"]["available"] for s in each)
    assert server["scrapes"] == sum(s["server"]["scrapes"] for s in each)


@pytest.mark.slow
def test_sessions_and_quality_come_from_the_pooled_records(sessions_run):
    """Sessions are counted per repeat (repeat 2's session 0 is another conversation) and the
    kept answers are every ok request's."""
    each = repeat_summaries(sessions_run)
    s = sessions_run.summary
    assert s["sessions"]["sessions"] == sum(e["sessions"]["sessions"] for e in each)
    assert s["sessions"]["sessions"] >= 2 * 12 // 3
    assert s["quality"] is not None and "quality" in each[0]
    recs = load_records(sessions_run.run_dir)
    assert len(recs) == 2 * 12 and all(r.answer for r in recs)


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """Two repeats of a sweep over c = 1 and 4, 8 requests a stage."""
    return repeated(
        tmp_path_factory.mktemp("sweep"),
        load__concurrency=None,
        workload__num_requests=None,
        load__sweep={"concurrency": [1, 4], "stage_requests": 8, "ramp_s": 0},
    )


@pytest.mark.slow
def test_a_sweep_repeats_whole(sweep_run):
    """Every repeat ran both stages; the parent's stage i counts stage i of each repeat, its
    curve has the sweep's two levels, and the repeats block the figures per stage."""
    each = repeat_summaries(sweep_run)
    s = sweep_run.summary
    assert [st["name"] for st in s["stages"]] == ["c=1", "c=4"]
    for i, stage in enumerate(s["stages"]):
        assert [len(e["stages"]) for e in each] == [2, 2]
        assert stage["counts"]["ok"] == sum(e["stages"][i]["counts"]["ok"] for e in each) == 2 * 8
        seconds = sum(e["stages"][i]["window"]["seconds"] for e in each)
        assert stage["window"]["seconds"] == pytest.approx(seconds)
    assert len(s["curve"]["points"]) == 2
    assert s["repeats"]["completed"] == N and s["complete"]
    assert len(load_records(sweep_run.run_dir)) == 2 * 2 * 8
    RunResult.load(sweep_run.run_dir)  # the saved file passes the schema check
