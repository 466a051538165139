"""The preflight and "nothing served, nothing passes", as a user meets them on the command line.

A server that refuses ``ignore_eos`` with FastAPI's 422 (the hostile server's
``unknown_field_422``, in transformers serve's words): under ``target.ignore_eos: auto`` the run
drops the field, says so once and records it; under ``true`` it stops before the load with the
server's reason and the fix (exit 2); without the preflight every request fails, the console,
the report, ``compare`` and the gate show the server's message, and the run exits 3. A sweep, a
capacity search and an experiment whose every request fails exit nonzero too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from loadgen import records as R
from loadgen.analysis.repeats import TOO_FEW, t_interval
from loadgen.cli.common import EXIT_BAD_INPUT, EXIT_NOTHING_SERVED, EXIT_OK, EXIT_SLA_FAIL
from loadgen.runner.preflight import DROPPED_IGNORE_EOS
from loadgen.testing.hostile import UNKNOWN_FIELD, HostileServer
from loadgen.testing.server import StreamServer

from helpers import cli

FIX = "the server does not take ignore_eos"


def _profile(tmp: Path, **target: object) -> Path:
    """A small chat profile; ``target`` over its defaults (ignore_eos: auto, as shipped)."""
    body = {
        "name": "pre",
        "target": {"endpoint": "chat", **target},
        "workload": {"seed": 0, "num_requests": 6, "input_tokens": 16, "output_tokens": 8},
        "load": {"concurrency": 2},
        "output": {"progress": False},
    }
    path = tmp / "profile.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _run(tmp: Path, url: str, *flags: str, run_id: str = "r", profile: Path | None = None):
    return cli(
        "run",
        str(profile or _profile(tmp)),
        "--url",
        url,
        "--no-progress",
        "--out",
        str(tmp / "out"),
        "--run-id",
        run_id,
        *flags,
    )


def _summary(tmp: Path, run_id: str = "r") -> dict:
    return json.loads((tmp / "out" / run_id / "summary.json").read_text())


def _records(tmp: Path, run_id: str = "r") -> list[dict]:
    return [json.loads(x) for x in (tmp / "out" / run_id / "requests.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_auto_drops_a_refused_ignore_eos_says_so_once_and_records_it(tmp_path):
    """ignore_eos: auto against a server that refuses the field: two preflight requests (the
    refused one, the one without it), then every request ok without the field; one console
    line, the note in the header, the conditions and the resolved profile say so."""
    with HostileServer("unknown_field_422") as srv:
        done = _run(tmp_path, srv.url)
        seen = srv.requests_seen
    console = " ".join((done.stdout + done.stderr).split())  # rich wraps long lines
    assert done.returncode == EXIT_OK, console[-3000:]
    assert console.count(f"preflight: {DROPPED_IGNORE_EOS}") == 1
    assert f"it said: {UNKNOWN_FIELD}" in console
    assert f"note {DROPPED_IGNORE_EOS}" in console
    records = _records(tmp_path)
    assert len(records) == 6 and all(r["ok"] for r in records)
    assert seen == 6 + 2  # the preflight's two: what the server saw, nothing hidden
    # The hostile server ends these streams without [DONE]: accepted, counted, said once.
    assert {r["stream_end"] for r in records} == {R.NO_TERMINATOR}
    assert "stream end 6 ok stream(s) closed after their finish without data: [DONE]" in console
    cond = _summary(tmp_path)["conditions"]
    assert cond["server"]["preflight"] == {
        "sent": True,
        "ok": True,
        "error_class": "http_422",
        "message": UNKNOWN_FIELD,
        "dropped": ["ignore_eos"],
        "note": DROPPED_IGNORE_EOS,
    }
    assert cond["profile"]["target"]["ignore_eos"] is False
    report = (tmp_path / "out" / "r" / "report.md").read_text()
    assert DROPPED_IGNORE_EOS in report


def test_a_strict_ignore_eos_stops_before_the_load_with_the_reason_and_the_fix(tmp_path):
    """ignore_eos: true is kept: the refused preflight is the run's one error line, exit 2,
    and no load was sent (one request reached the server, no records were written)."""
    with HostileServer("unknown_field_422") as srv:
        done = _run(tmp_path, srv.url, profile=_profile(tmp_path, ignore_eos=True))
        seen = srv.requests_seen
    assert done.returncode == EXIT_BAD_INPUT, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"loadgen: error: the server refused the preflight request (HTTP 422): {UNKNOWN_FIELD}; {FIX}"
    ), last
    assert "Traceback" not in done.stderr
    assert seen == 1
    assert not (tmp_path / "out" / "r" / "requests.jsonl").exists()


@pytest.mark.slow
def test_without_the_preflight_every_refusal_is_shown_where_the_user_looks(tmp_path):
    """--no-preflight with ignore_eos: true: every request is an http_422. The console gives
    the count, the share, the server's words and the fix; the run exits 3 with a last line
    that says why; the report's errors table quotes the server; compare and the gate do too."""
    with HostileServer("unknown_field_422") as srv:
        bad = _run(tmp_path, srv.url, "--no-preflight", profile=_profile(tmp_path, ignore_eos=True))
        good = _run(tmp_path, srv.url, run_id="good")
    assert good.returncode == EXIT_OK, good.stderr[-2000:]
    assert bad.returncode == EXIT_NOTHING_SERVED, bad.stderr[-3000:]
    assert f"  http_422 6 (100 %): {UNKNOWN_FIELD}\n    fix: {FIX}" in bad.stdout
    last = bad.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "loadgen: nothing was served: 6 of 6 requests failed (http_422 6); "
        f'the server said http_422 "{UNKNOWN_FIELD}" (fix: {FIX}'
    ), last
    assert {r["error_class"] for r in _records(tmp_path)} == {"http_422"}
    sample = _summary(tmp_path)["counts"]["error_samples"]["http_422"]
    assert sample["message"] == UNKNOWN_FIELD and sample["hint"].startswith(FIX)
    report = (tmp_path / "out" / "r" / "report.md").read_text()
    assert f"| http_422 | 6 | 100.0% | {UNKNOWN_FIELD} |" in report
    assert f"**[WARNING] http_422: the fix.** {FIX}" in report
    runs = [str(tmp_path / "out" / n) for n in ("good", "r")]
    compared = cli("compare", *runs, "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0, compared.stderr[-2000:]
    md = next((tmp_path / "cmp").glob("*.md")).read_text()
    failed = md[md.index("## Failed requests") :]
    assert UNKNOWN_FIELD in failed and FIX in failed
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {metric: error_rate, max: 0.01}\n")
    gate = cli("gate", runs[1], "--baseline", runs[0], "--rules", str(rules), "--allow-different")
    assert gate.returncode != 0
    assert f'the server said http_422 "{UNKNOWN_FIELD}"' in gate.stdout + gate.stderr


@pytest.mark.slow
def test_a_failing_preflight_that_is_no_refusal_lets_the_load_go_and_count(tmp_path):
    """A 500 to the preflight is the server failing, not refusing the body: a warning, the
    load goes ahead, each failure is counted with the server's message, and exit 3."""
    with StreamServer(fail="status:500") as srv:
        done = _run(tmp_path, srv.url)
    assert "warning: the preflight request failed (http_500: scripted HTTP 500)" in done.stderr
    assert done.returncode == EXIT_NOTHING_SERVED, done.stderr[-2000:]
    assert len(_records(tmp_path)) == 6
    assert "  http_500 6 (100 %): scripted HTTP 500" in done.stdout
    assert _summary(tmp_path)["conditions"]["server"]["preflight"]["error_class"] == "http_500"


@pytest.mark.slow
def test_a_sweep_that_served_nothing_is_neither_steady_nor_kneed_and_exits_3(tmp_path):
    """Every stage refused: no stage is steady, the queue is not called stable, the knee line
    says no stage had an ok request, and the sweep exits 3 whatever --fail-on-sla says."""
    body = {
        "name": "sweep",
        "target": {"endpoint": "chat"},
        "workload": {"seed": 0, "input_tokens": 16, "output_tokens": 8},
        "load": {"sweep": {"concurrency": [1, 2, 4], "stage_requests": 16}},
        "output": {"progress": False},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(body))
    with StreamServer(fail="status:500") as srv:
        done = _run(tmp_path, srv.url, profile=path)
    assert done.returncode == EXIT_NOTHING_SERVED, done.stderr[-3000:]
    assert "knee    none: no stage had an ok request" in done.stdout
    summary = _summary(tmp_path)
    assert [s["steady_state"]["steady"] for s in summary["stages"]] == [False] * 3
    assert {s["steady_state"]["reason"] for s in summary["stages"]} == {"no measured request was ok"}
    assert {s["saturation"]["verdict"] for s in summary["stages"]} == {"undetermined"}
    assert summary["curve"]["stages_with_ok"] == 0 and summary["curve"]["knee"] is None


@pytest.mark.slow
def test_a_capacity_search_that_served_nothing_exits_3_with_the_servers_words(tmp_path):
    """Every stage of the search refused: no capacity, and exit 3 with the server's message on
    the last line (not the 1 of "no rate met the SLOs", which would blame the SLA)."""
    with StreamServer(fail="status:500") as srv:
        done = cli(
            "capacity",
            str(_profile(tmp_path)),
            "--url",
            srv.url,
            "--sla",
            "ttft_ms<5000",
            "--stage-duration",
            "1s",
            "--stage-warmup",
            "0",
            "--max-stages",
            "2",
            "--out",
            str(tmp_path / "out"),
            "--run-id",
            "cap",
            timeout=120,
        )
    assert done.returncode == EXIT_NOTHING_SERVED, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("loadgen: nothing was served: ")
        and 'the server said http_500 "scripted HTTP 500"' in last
    )


@pytest.mark.slow
def test_an_experiment_cell_that_served_nothing_fails_and_is_not_ranked(tmp_path):
    """Two url: configurations, one of them refusing every request: its cell is failed with
    the error classes and the server's message, it is listed unranked, the other is ranked
    first, and the experiment exits 1."""
    work = {
        "name": "tiny",
        "target": {"endpoint": "chat"},
        "workload": {"seed": 0, "input_tokens": 16, "output_tokens": 8},
        "load": {"concurrency": 1},
    }
    (tmp_path / "work.yaml").write_text(yaml.safe_dump(work))
    with StreamServer() as good, StreamServer(fail="status:500") as bad:
        body = {
            "name": "served",
            "profile": "work.yaml",
            "load": {"stages": [{"concurrency": 1, "num_requests": 4}]},
            "sla": {"ttft_ms": 5000},
            "backends": [{"name": "good", "url": good.url}, {"name": "bad", "url": bad.url}],
        }
        (tmp_path / "exp.yaml").write_text(yaml.safe_dump(body))
        done = cli("experiment", str(tmp_path / "exp.yaml"), "--out", str(tmp_path), "--id", "e", timeout=300)
    assert done.returncode == EXIT_SLA_FAIL, done.stderr[-3000:]
    state = json.loads((tmp_path / "e" / "experiment.json").read_text())
    cell = state["cells"]["bad/repeat-1"]
    assert cell["state"] == "failed"
    assert cell["error"].startswith("nothing was served: 4 of 4 requests failed (http_500 4)")
    assert state["cells"]["good/repeat-1"]["state"] == "done"
    rows = state["ranking"]["rows"]
    assert [(r["label"], r["rank"]) for r in rows] == [("good", 1), ("bad", None)]
    assert "-. bad" in done.stdout and "not ranked: every repeat failed" in done.stdout
    md = (tmp_path / "e" / "experiment.md").read_text()
    assert "| bad/repeat-1 | failed | 1 | nothing was served: 4 of 4 requests failed (http_500 4)" in md


def test_intervals_are_clipped_at_zero_and_two_repeats_bound_nothing():
    """The t interval of non-negative figures never goes below 0; below 3 repeats the figure
    is shown as too few to bound (the repeats' report table and the experiment's ranking)."""
    from loadgen.report.repeats import interval_text

    iv = t_interval([2.0, 18.0, 1.0])
    assert iv.low == 0.0 and iv.high is not None and iv.high > 18.0
    two = t_interval([5.8, 17.1])
    fig = {"metric": "capacity_rps", "n": two.n, "low": two.low, "high": two.high}
    assert interval_text(fig) == TOO_FEW
    three = t_interval([11.0, 12.0, 13.0])
    fig3 = {"metric": "capacity_rps", "n": 3, "low": three.low, "high": three.high}
    assert interval_text(fig3).startswith("[") and TOO_FEW not in interval_text(fig3)
