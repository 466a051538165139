"""Load shapes through the driver: a shape decides only when requests go out; the driver keeps
the books (one record per request sent, stage stamped, stop cancels what is in flight).

The backend here is a stand-in at the driver's seam (no HTTP involved): it holds each request
for a fixed time and records how many were in flight at once.
"""

from __future__ import annotations

import asyncio

from loadgen.backends.stream import Live
from loadgen.clock import now_ns
from loadgen.records import CANCELLED, RequestRecord, RequestSpec
from loadgen.runner.driver import Limits, drive
from loadgen.runner.shapes import ClosedLoop, Dispatcher, OpenLoop

MS = 1_000_000


class Specs:
    def request(self, i: int) -> RequestSpec:
        return RequestSpec(id=i, prompt="x", messages=None, prompt_tokens=3, output_tokens=2)


class HoldingBackend:
    """Holds every request for ``hold_ms``, then marks it ok; tracks the peak in flight."""

    def __init__(self, hold_ms: float) -> None:
        self.live = Live()
        self.hold_s = hold_ms / 1e3
        self.peak = 0
        self.now = 0

    async def send(self, spec: RequestSpec, rec: RequestRecord) -> None:
        rec.t_send_ns = now_ns()
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(self.hold_s)
            rec.ok, rec.t_end_ns, rec.output_tokens = True, now_ns(), spec.output_tokens
        finally:
            self.now -= 1


def run(coro):
    return asyncio.run(coro)


class TestClosedLoop:
    def test_keeps_exactly_n_in_flight_and_writes_one_record_per_request(self):
        """c=4 over 20 requests: never more than 4 at once, 20 records with distinct ids."""
        backend, written = HoldingBackend(5), []
        res = run(drive(Specs(), backend, ClosedLoop(4), Limits(num_requests=20), on_record=written.append))
        assert backend.peak == 4
        assert sorted(r.id for r in res.records) == list(range(20))
        assert [r.id for r in written] == [r.id for r in res.records]
        assert all(r.ok and r.stage == 0 for r in res.records)
        assert backend.live.done == 20 and backend.live.in_flight == 0

    def test_warmup_requests_come_on_top_and_are_marked(self):
        res = run(drive(Specs(), HoldingBackend(1), ClosedLoop(2), Limits(num_requests=6, warmup_requests=2)))
        assert len(res.records) == 8
        assert sorted(r.id for r in res.records if r.warmup) == [0, 1]


class TestOpenLoop:
    def test_sends_on_the_schedule_and_records_it(self):
        """Offsets 0, 10, 20, 30 ms: each record's t_sched is start + offset exactly, and it went out
        after it and before the next one was due."""
        offsets = [0, 10 * MS, 20 * MS, 30 * MS]
        res = run(drive(Specs(), HoldingBackend(2), OpenLoop(offsets), Limits(num_requests=4)))
        by_id = {r.id: r for r in res.records}
        assert [by_id[i].t_sched_ns - res.started_ns for i in range(4)] == offsets
        due = [by_id[i].t_sched_ns for i in range(4)] + [by_id[3].t_sched_ns + 10 * MS]
        assert all(due[i] <= by_id[i].t_send_ns < due[i + 1] for i in range(4))

    def test_cap_makes_waiting_for_a_slot_client_lag(self):
        """All four due at once under a cap of 1, each held 20 ms: each goes out only when the one
        before it ended, so the lag grows by a hold each time (the last ~60 ms late)."""
        res = run(
            drive(
                Specs(), HoldingBackend(20), OpenLoop([0, 0, 0, 0], max_concurrency=1), Limits(num_requests=4)
            )
        )
        recs = sorted(res.records, key=lambda r: r.t_send_ns)
        assert recs[0].t_send_ns < recs[0].t_end_ns <= recs[1].t_send_ns  # the first waited for no slot
        for before, r in zip(recs, recs[1:]):
            assert r.t_send_ns >= before.t_end_ns >= before.t_send_ns + 19 * MS  # held 20 ms


class Burst:
    """A shape the driver has never seen: everything at once, in the background."""

    async def run(self, d: Dispatcher) -> None:
        t = now_ns()
        for i in d.request_ids():
            d.spawn(i, t, d.spec(i))
        await d.drain()


class TestNewShapes:
    def test_a_new_shape_needs_no_driver_change_and_records_carry_its_stage(self):
        backend = HoldingBackend(10)
        res = run(drive(Specs(), backend, Burst(), Limits(num_requests=7), stage=3))
        assert backend.peak == 7
        assert len(res.records) == 7 and {r.stage for r in res.records} == {3}


class TestStop:
    def test_stop_cancels_in_flight_and_still_accounts_for_every_request(self):
        """c=3 with 200 ms holds, stopped at 50 ms: the three in flight are cancelled records."""

        async def go():
            stop = asyncio.Event()
            asyncio.get_running_loop().call_later(0.05, stop.set)
            return await drive(
                Specs(), HoldingBackend(200), ClosedLoop(3), Limits(num_requests=10), stop=stop
            )

        res = run(go())
        assert res.interrupted
        assert len(res.records) == 3
        assert {r.error_class for r in res.records} == {CANCELLED}

    def test_duration_limit_stops_dispatching(self):
        res = run(drive(Specs(), HoldingBackend(10), ClosedLoop(1), Limits(duration_s=0.05)))
        assert not res.interrupted
        assert 3 <= len(res.records) <= 6
        assert all(r.ok for r in res.records)


class RefusedBackend:
    """Every request fails at once (a dead server refusing connections); requests with odd ids
    swallow a cancel that lands on them, as a stdlib wait_for before 3.12 may."""

    def __init__(self) -> None:
        self.live = Live()
        self.sent = 0

    async def send(self, spec: RequestSpec, rec: RequestRecord) -> None:
        self.sent += 1
        rec.t_send_ns = now_ns()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            if spec.id % 2 == 0:
                raise
        rec.ok, rec.error_class, rec.t_end_ns = False, "connect", now_ns()


class TestStopping:
    def test_no_slot_sends_after_a_stopped_drive_returned(self):
        """Stopped after 200 records against a server refusing at once: when drive returns,
        every record is written and no slot sends again (one that swallowed its cancel used to
        run on, writing into a closed records file)."""

        async def main() -> tuple[int, int, int]:
            backend, written, stop = RefusedBackend(), [], asyncio.Event()

            def keep(rec: RequestRecord) -> None:
                written.append(rec)
                if len(written) == 200:
                    stop.set()

            await drive(Specs(), backend, ClosedLoop(2), Limits(duration_s=30), on_record=keep, stop=stop)
            at_return = (backend.sent, len(written))
            await asyncio.sleep(0.05)
            return *at_return, backend.sent

        sent, written, sent_later = run(main())
        assert sent_later == sent == written
