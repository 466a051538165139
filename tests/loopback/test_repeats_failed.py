"""A repeat that raises (``--repeats N``): marked failed in the parent's summary, the others pooled,
the command non-zero.

The failure is the scripted server's: ``fail: status:400`` with ``fail_every`` k refuses the
server's requests number 0, k, 2k, ... (it counts every request it answers, from 0). The test
takes number 0 itself, so with R requests a repeat (its preflight, then its load, no warm-up)
request R + 2 is repeat 2's preflight: the server refuses it, as a server redeployed between two
repeats with another model would, and repeat 2 stops before any load. Repeat 3 sends requests
R + 3 to 2R + 3, none a multiple of R + 2.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from loadgen.errors import RunError
from loadgen.result import RunResult, load_records
from loadgen.runner import api, repeats
from loadgen.testing.server import StreamServer

from helpers import cli, profile, run

R = 4  # requests a repeat
REFUSED = (
    "the server refused the preflight request (HTTP 400): scripted HTTP 400; fix the request the "
    "profile builds, or pass --no-preflight"
)
REASON = f"3 of 3 repeats ran, 2 pooled; repeat-2 failed: {REFUSED}"
SECRET = "sk-test-0123456789abcdef"


def refusing_second_repeat() -> StreamServer:
    return StreamServer(ttft_ms=5, itl_ms=1, fail="status:400", fail_every=R + 2)


def take_request_zero(url: str) -> None:
    """Send the server's request number 0 (refused: 0 is a multiple of every ``fail_every``)."""
    body = b'{"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}'
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError, match="400"):
        urllib.request.urlopen(req, timeout=10)


def three_repeats(out: Path, url: str, **kw):
    return profile(out, url, load__repeats=3, workload__num_requests=R, target__ignore_eos=False, **kw)


def test_failed_repeat_is_marked_and_the_others_pooled(tmp_path):
    """Repeat 2 is refused: it is listed with its error and no figures, repeats 1 and 3 are
    pooled (their 8 records, their figures), and the run is incomplete, saying why."""
    with refusing_second_repeat() as server:
        take_request_zero(server.url)
        res = run(three_repeats(tmp_path, server.url, sla__rules=["p99 ttft_ms<10000"]))
    s = RunResult.load(res.run_dir).summary  # the saved file passes the schema check
    assert s["repeats"]["runs"] == [
        {"index": 1, "path": "repeat-1", "complete": True},
        {"index": 2, "path": "repeat-2", "complete": False, "error": REFUSED},
        {"index": 3, "path": "repeat-3", "complete": True},
    ]
    assert (s["repeats"]["count"], s["repeats"]["completed"]) == (3, 2)
    assert (s["complete"], s["incomplete_reason"]) == (False, REASON)
    assert s["ended_by"] == {"limit": "stopped", "text": f"stopped early: {REASON}"}
    assert (s["counts"]["sent"], s["counts"]["ok"], len(load_records(res.run_dir))) == (2 * R, 2 * R, 2 * R)
    assert s["sla"]["verdict"] == "incomplete"
    each = [RunResult.load(res.run_dir / f"repeat-{k}").summary for k in (1, 3)]
    p50 = next(f for f in s["repeats"]["figures"] if f["figure"] == "p50 ttft_ms")
    assert p50["values"] == [each[0]["metrics"]["ttft_ms"]["p50"], None, each[1]["metrics"]["ttft_ms"]["p50"]]
    assert p50["n"] == 2


@pytest.mark.slow
def test_cli_exits_nonzero_naming_the_failed_repeat(tmp_path):
    """`loadgen run --repeats 3` with repeat 2 refused: the parent's summary.json is written and
    the command exits 130 (an incomplete run), its last line the reason."""
    with refusing_second_repeat() as server:
        take_request_zero(server.url)
        done = cli(
            "run",
            "--url",
            server.url,
            "--num-requests",
            str(R),
            "--concurrency",
            "2",
            "--repeats",
            "3",
            "--set",
            "target.ignore_eos=false",
            "--out",
            str(tmp_path),
            "--run-id",
            "r",
            "--no-report",
            "--no-progress",
        )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"loadgen: incomplete run: {REASON}"
    assert RunResult.load(tmp_path / "r").summary["repeats"]["runs"][1]["error"] == REFUSED


def test_an_unexpected_error_is_named_and_scrubbed(tmp_path):
    """An error that is not loadgen's (here a RuntimeError carrying the API key) is stored with
    its type and without the secret; the repeats after it still run."""
    with StreamServer(ttft_ms=5, itl_ms=1) as server:
        prof = profile(
            tmp_path,
            server.url,
            load__repeats=3,
            workload__num_requests=R,
            target__headers={"Authorization": f"Bearer {SECRET}"},
        )

        async def one(p):
            if p.output.run_id == "repeat-2":
                raise RuntimeError(f"the transport broke, sending Bearer {SECRET}")
            return await api.run_async(p)

        res = asyncio.run(repeats.run_repeated(prof, one))
    runs = res.summary["repeats"]["runs"]
    assert runs[1]["error"] == "RuntimeError: the transport broke, sending ***"  # the header's value, whole
    assert [r["complete"] for r in runs] == [True, False, True]
    assert SECRET not in (res.run_dir / "summary.json").read_text()


def test_every_repeat_failed_is_one_error(tmp_path):
    """A server refusing every request: nothing to pool, one RunError naming each repeat."""
    with StreamServer(ttft_ms=5, itl_ms=1, fail="status:400") as server:
        prof = profile(
            tmp_path, server.url, load__repeats=2, workload__num_requests=R, target__ignore_eos=False
        )
        with pytest.raises(RunError) as err:
            run(prof)
    assert str(err.value).endswith(f"has nothing to pool: repeat-1: {REFUSED}; repeat-2: {REFUSED}")
