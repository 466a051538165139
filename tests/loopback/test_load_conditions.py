"""Conditions say what ran: each load shape, run against the scripted server, records the load
that was executed in ``conditions.load``, in the profile's load beside it and in each stage's
``load``: a closed loop is a closed loop (never the open loop's default ``poisson``), a trace
replay a trace, a sweep or a list of stages its levels, and a knob that did not run (a closed
loop's burstiness or in-flight cap, a Poisson process's burstiness) is not recorded at all."""

from __future__ import annotations

import json

import pytest

from loadgen.analysis.condition_diff import condition_diff
from loadgen.testing.server import StreamServer

from helpers import run

FAST = {"workload__input_tokens": 8, "workload__output_tokens": 2}


@pytest.fixture(scope="module")
def fast_server():
    with StreamServer(ttft_ms=2, itl_ms=1) as s:
        yield s


def recorded(res) -> tuple[dict, dict, list[dict]]:
    cond = res.summary["conditions"]
    return cond["load"], cond["profile"]["load"], [s["load"] for s in res.summary.get("stages", [])]


def test_a_closed_loop_says_closed_loop(fast_server, make_profile):
    res = run(make_profile(fast_server.url, load__concurrency=3, workload__num_requests=6, **FAST))
    load, in_profile, stages = recorded(res)
    assert load == in_profile
    assert (load["concurrency"], load["rate"], load["arrival"]) == (3, None, "closed loop")
    assert "burstiness" not in load and "max_concurrency" not in load
    assert stages == []


@pytest.mark.parametrize(
    ("arrival", "extra", "want"),
    [
        ("poisson", {}, {}),
        ("constant", {"load__max_concurrency": 2}, {"max_concurrency": 2}),
        ("gamma", {"load__burstiness": 0.5}, {"burstiness": 0.5}),
    ],
)
def test_an_open_loop_says_its_process_and_only_the_knobs_it_used(
    fast_server, make_profile, arrival, extra, want
):
    res = run(
        make_profile(
            fast_server.url,
            load__concurrency=None,
            load__rate=50.0,
            load__arrival=arrival,
            workload__num_requests=6,
            **extra,
            **FAST,
        )
    )
    load, in_profile, _ = recorded(res)
    assert load == in_profile
    assert (load["concurrency"], load["rate"], load["arrival"]) == (None, 50.0, arrival)
    assert load.get("max_concurrency") == want.get("max_concurrency")
    assert ("burstiness" in load) == (arrival == "gamma")
    assert load.get("burstiness") == want.get("burstiness")


def test_a_trace_replay_says_trace(fast_server, make_profile, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp_ms": 5 * k, "input_tokens": 8, "output_tokens": 2}) + "\n"
            for k in range(5)
        )
    )
    res = run(
        make_profile(
            fast_server.url,
            load__concurrency=None,
            workload__num_requests=None,
            workload__trace={"path": str(path)},
        )
    )
    load, in_profile, _ = recorded(res)
    assert load == in_profile
    assert (load["concurrency"], load["rate"], load["arrival"]) == (None, None, "trace")
    assert "burstiness" not in load


def test_a_sweep_records_its_levels_and_each_stage_what_it_ran(fast_server, make_profile):
    res = run(
        make_profile(
            fast_server.url,
            load__concurrency=None,
            workload__num_requests=None,
            load__sweep={"concurrency": [1, 2], "stage_requests": 4},
            **FAST,
        )
    )
    load, in_profile, stages = recorded(res)
    assert load == in_profile
    assert not {"concurrency", "rate", "arrival", "burstiness", "max_concurrency"} & set(load)
    assert load["sweep"]["concurrency"] == [1, 2] and load["sweep"]["arrival"] == "closed loop"
    assert "burstiness" not in load["sweep"]
    assert [(s["concurrency"], s["arrival"]) for s in stages] == [(1, "closed loop"), (2, "closed loop")]
    assert all("burstiness" not in s and "max_concurrency" not in s for s in stages)


def test_mixed_stages_record_each_level_as_it_ran(fast_server, make_profile):
    levels = [
        {"concurrency": 2, "num_requests": 4},
        {"rate": 40.0, "arrival": "gamma", "burstiness": 2.0, "num_requests": 4},
        {"rate": 40.0, "max_concurrency": 1, "num_requests": 4},
    ]
    res = run(
        make_profile(
            fast_server.url, load__concurrency=None, workload__num_requests=None, load__stages=levels, **FAST
        )
    )
    load, in_profile, stages = recorded(res)
    assert load == in_profile and "arrival" not in load
    assert [s["arrival"] for s in load["stages"]] == ["closed loop", "gamma", "poisson"]
    got = [
        (s["concurrency"], s["rate"], s["arrival"], s.get("burstiness"), s.get("max_concurrency"))
        for s in stages
    ]
    assert got == [
        (2, None, "closed loop", None, None),
        (None, 40.0, "gamma", 2.0, None),
        (None, 40.0, "poisson", None, 1),
    ]


def test_a_closed_loop_beside_a_peers_concurrent_run_has_the_same_arrival(fast_server, make_profile):
    """The comparison the issue saw warn: loadgen's closed loop against a peer's concurrent run
    (GuideLLM records ``arrival: closed loop``) no longer differs on load.arrival."""
    res = run(make_profile(fast_server.url, load__concurrency=4, workload__num_requests=6, **FAST))
    ours = res.summary["conditions"]
    peer = {**ours, "load": {"concurrency": 4, "rate": None, "arrival": "closed loop"}}
    differing = {d.field for d in condition_diff([ours, peer])}
    assert "load.arrival" not in differing
