"""Splitting a stage among workers: the union of the shares is exactly the stage.

Closed loop: the slots add up to the concurrency and every id of a counted stage belongs to
exactly one worker, in proportion to its slots. Open loop: every (id, deadline) of the schedule
goes to exactly one worker, and each worker's own stream of a Poisson schedule is itself
Poisson at rate / N (checked with a Kolmogorov-Smirnov test against the exponential law).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from loadgen.runner.driver import Limits
from loadgen.runner.shapes import ClosedLoop, OpenLoop
from loadgen.runner.split import SlotIds, split
from loadgen.workload.arrivals import arrival_offsets_ns


class TestClosedLoop:
    @pytest.mark.parametrize(("conc", "workers"), [(8, 2), (7, 3), (64, 8), (3, 5)])
    def test_slots_and_ids_partition_the_stage(self, conc, workers):
        limits = Limits(num_requests=1000, warmup_requests=10, first_id=50)
        parts = split(ClosedLoop(conc), limits, workers, seed=0)
        assert len(parts) == workers
        live = [p for p in parts if p is not None]
        assert sum(p[0].concurrency for p in live) == conc  # type: ignore[union-attr]
        ids = [i for p in live for i in p[1].ids]  # type: ignore[union-attr]
        assert sorted(ids) == list(range(50, 1060))
        for shape, lim in live:
            share = len(list(lim.ids))  # type: ignore[arg-type]
            assert abs(share - 1010 * shape.concurrency / conc) <= shape.concurrency  # type: ignore[union-attr]
            assert lim.warmup_requests == 10 and lim.first_id == 50  # the warm-up rule is global
        assert sum(p is None for p in parts) == max(0, workers - conc)

    def test_a_duration_stage_numbers_each_slot_without_gaps(self):
        ids = SlotIds(first=100, period=5, slot_lo=2, slot_hi=4, count=None)
        assert list(itertools.islice(ids, 6)) == [102, 103, 107, 108, 112, 113]
        assert 107 in ids and 106 not in ids and 99 not in ids

    def test_a_ramp_starts_each_worker_from_its_share_of_the_last_level(self):
        parts = split(ClosedLoop(10, ramp_s=2.0, ramp_from=4), Limits(duration_s=5), 2, seed=0)
        assert [(p[0].concurrency, p[0].ramp_from, p[0].ramp_s) for p in parts] == [(5, 2, 2.0), (5, 2, 2.0)]  # type: ignore[index,union-attr]


class TestOpenLoop:
    def test_the_union_of_the_shares_is_exactly_the_schedule(self):
        schedule = arrival_offsets_ns(2000, 50.0, "poisson", 1.0, seed=3)
        parts = split(OpenLoop(schedule, max_concurrency=9), Limits(num_requests=2000, first_id=7), 3, seed=3)
        pairs = sorted(
            (i, int(t))
            for p in parts
            if p is not None
            for i, t in zip(p[1].ids, p[0].schedule_ns)  # type: ignore[arg-type,union-attr]
        )
        assert pairs == [(7 + k, int(t)) for k, t in enumerate(schedule)]
        assert [p[0].max_concurrency for p in parts] == [3, 3, 3]  # type: ignore[union-attr]

    def test_each_workers_stream_of_a_poisson_schedule_is_poisson(self):
        """Random thinning keeps Poisson: each worker's gaps are exponential (KS p > 0.01 against
        the exponential law of their own mean, N times the schedule's within 5 %); a round robin
        would give Erlang-2 gaps, which the same test rejects (checked below)."""
        rate, n = 100.0, 2
        schedule = arrival_offsets_ns(6000, rate, "poisson", 1.0, seed=11)
        parts = split(OpenLoop(schedule), Limits(num_requests=6000), n, seed=11)
        for p in parts:
            gaps_s = np.diff(np.asarray(p[0].schedule_ns)) / 1e9  # type: ignore[index,union-attr]
            overall = np.diff(schedule).mean() / 1e9
            assert gaps_s.mean() == pytest.approx(n * overall, rel=0.05)
            assert stats.kstest(gaps_s, "expon", args=(0, gaps_s.mean())).pvalue > 0.01
        robin = np.diff(np.asarray(schedule)[::n]) / 1e9
        assert stats.kstest(robin, "expon", args=(0, robin.mean())).pvalue < 1e-6

    def test_one_worker_gets_the_stage_unchanged(self):
        shape, limits = OpenLoop([0, 5, 9]), Limits(num_requests=3)
        assert split(shape, limits, 1, seed=0) == [(shape, limits)]
