"""The replica balancer's rules (runner/replicas.py) and the replicas block (analysis/replicas.py),
from literal answers and literal records."""

from __future__ import annotations

import asyncio

from loadgen.analysis.replicas import replicas
from loadgen.analysis.table import RecordTable
from loadgen.backends.stream import Live
from loadgen.records import CONNECT, READ, RequestRecord, RequestSpec
from loadgen.runner.replicas import Balanced, Replica

from helpers import failed_record, ok_record


class Answers:
    """A replica's adapter that answers from a script: ok, or a failure of one class."""

    def __init__(self, error: str | None = None) -> None:
        self.error, self.live, self.transport = error, Live(), None

    async def send(self, spec: RequestSpec, rec: RequestRecord) -> None:
        await asyncio.sleep(0)
        rec.ok, rec.error_class = self.error is None, self.error


def _balanced(policy: str, *errors: str | None, eject_s: float = 60.0) -> Balanced:
    reps = [Replica(i, Answers(e), None) for i, e in enumerate(errors)]  # type: ignore[arg-type]
    return Balanced(reps, policy, Live(), eject_after=3, eject_s=eject_s)


def _spec(session: int | None = None) -> RequestSpec:
    return RequestSpec(id=0, prompt="hi", messages=None, prompt_tokens=1, output_tokens=1, session_id=session)


def _send(b: Balanced, n: int, session: int | None = None) -> list[int | None]:
    async def go() -> list[int | None]:
        out = []
        for _ in range(n):
            rec = RequestRecord(0, False, 0, 0, requested_output_tokens=1, requested_prompt_tokens=1)
            await b.send(_spec(session), rec)
            out.append(rec.replica)
        return out

    return asyncio.run(go())


class TestBalanced:
    def test_round_robin_takes_each_replica_in_turn(self):
        """Three replicas, seven requests: 0 1 2 0 1 2 0."""
        assert _send(_balanced("round_robin", None, None, None), 7) == [0, 1, 2, 0, 1, 2, 0]

    def test_a_replica_refusing_connections_is_out_after_three_in_a_row(self):
        """Replica 1 refuses: it takes requests 1, 3 and 5 (three connect failures), then none."""
        b = _balanced("least_in_flight", None, CONNECT)
        assert _send(b, 10) == [0, 1, 0, 1, 0, 1, 0, 0, 0, 0]
        assert b.replicas[1].ejections == 1 and b.replicas[1].out_until_ns > 0

    def test_an_ejected_replica_gets_one_trial_and_returns_when_it_answers(self):
        """Out for eject_s, then one trial; it answers now, so it is back in rotation."""
        b = _balanced("round_robin", None, CONNECT, eject_s=0.01)
        assert _send(b, 7) == [0, 1, 0, 1, 0, 1, 0]
        b.replicas[1].backend.error = None  # type: ignore[attr-defined]
        asyncio.run(asyncio.sleep(0.02))
        assert _send(b, 4) == [1, 0, 1, 0]
        assert b.replicas[1].out_until_ns == 0

    def test_a_failed_trial_keeps_it_out_longer(self):
        """A trial that fails again doubles the wait (2 x eject_s after the first failed trial)."""
        b = _balanced("round_robin", None, CONNECT, eject_s=0.01)
        _send(b, 6)
        asyncio.run(asyncio.sleep(0.02))
        assert _send(b, 4) == [0, 1, 0, 0]  # its trial, refused: out again
        r = b.replicas[1]
        assert r.failed_trials == 1 and not r.trial
        asyncio.run(asyncio.sleep(0.012))  # past eject_s, short of twice it
        assert _send(b, 2) == [0, 0]

    def test_a_read_error_is_not_a_connect_failure(self):
        """A replica whose streams break keeps its turn: only refused connections eject."""
        assert _send(_balanced("round_robin", None, READ), 8) == [0, 1] * 4

    def test_session_affinity_keeps_a_session_where_it_began(self):
        """Session 7 begins on replica 0 and stays there; session 8 begins on replica 1."""
        b = _balanced("session_affinity", None, None)
        assert _send(b, 3, session=7) == [0, 0, 0]
        assert _send(b, 2, session=8) == [1, 1]


class TestReplicasBlock:
    def test_rows_partition_the_run_and_name_the_tail(self):
        """Replica 1's requests are the slow ones: it holds the requests beyond the pooled p99."""
        recs = [ok_record(id=i, ttft_ms=100, replica=0) for i in range(6)]
        recs += [ok_record(id=6 + i, ttft_ms=100 + 100 * i, replica=1) for i in range(3)]
        lost = failed_record(id=9, error_class=CONNECT)
        lost.replica = 1
        recs.append(lost)
        block = replicas(RecordTable.from_records(recs), ["http://a", "http://b"], "round_robin", 2.0)
        assert block is not None
        a, b = block["by_replica"]
        assert (a["sent"], a["ok"], a["failed"], a["share"]) == (6, 6, 0, 0.6)
        assert (b["sent"], b["ok"], b["failed"], b["errors_by_class"]) == (4, 3, 1, {"connect": 1})
        assert a["ttft_ms"]["p50"] == 100.0 and b["ttft_ms"]["p50"] == 200.0
        ttft = block["tail"][0]
        assert (ttft["metric"], ttft["replica"], ttft["beyond"], ttft["share_of_tail"]) == (
            "ttft_ms",
            1,
            1,
            1.0,
        )
        assert ttft["share_of_requests"] == 0.4

    def test_a_run_against_one_url_has_no_block(self):
        assert replicas(RecordTable.from_records([ok_record()]), ["http://a"], "round_robin", 1.0) is None


class TestFlags:
    def test_url_twice_is_the_replicas_and_once_replaces_them(self):
        """--url given twice sets target.urls (target.url its first); given once, it replaces a
        profile's replicas."""
        from loadgen.cli.parser import build_parser, overrides
        from loadgen.config import load_profile

        parse = build_parser().parse_args
        base = {"workload.num_requests": 4, "load.concurrency": 1}
        two = overrides(parse(["run", "--url", "http://a:1", "--url", "http://b:2"]))
        t = load_profile(None, overrides={**base, **two}).target
        assert (t.url, t.urls) == ("http://a:1", ("http://a:1", "http://b:2"))
        one = overrides(parse(["run", "--url", "http://c:3"]))
        t = load_profile(None, overrides={**base, "target.urls": ["http://a:1", "http://b:2"], **one}).target
        assert (t.url, t.urls, t.replica_urls) == ("http://c:3", None, ("http://c:3",))
