"""The experiment's ranking: capacity at the SLA from a sweep's stages, intervals over repeats,
and when one configuration may be said to beat the next (literal summaries, no server)."""

from __future__ import annotations

import pytest

from loadgen.analysis.ranking import ConfigRuns, at_sla, rank, repeats_to_separate
from loadgen.analysis.repeats import TInterval

SLOS = {"ttft_ms": 700.0, "tpot_ms": 50.0}


def point(stage, offered, tput, attained, tok=None, good=None):
    return {
        "stage": stage,
        "name": f"c={offered}",
        "offered": offered,
        "throughput_rps": tput,
        "output_tokens_per_s": tok if tok is not None else tput * 64,
        "goodput_rps": good,
        "attained_fraction": attained,
    }


def sweep(*points):
    return {"curve": {"points": list(points)}}


class TestAtSla:
    def test_the_crossing_is_interpolated_on_measured_throughput(self):
        """Attainment 1.0 at 10 req/s and 0.5 at 20 req/s: 0.99 is crossed 2 % of the way, at 10.2."""
        got = at_sla(
            sweep(point(0, 4, 10.0, 1.0), point(1, 16, 20.0, 0.5), point(2, 48, 21.0, 0.0)), 0.99, SLOS
        )
        assert got["basis"] == "crossing"
        assert got["capacity_rps"] == pytest.approx(10.2)
        assert got["output_tokens_per_s"] == pytest.approx(10.2 * 64)

    def test_every_stage_passing_is_a_lower_bound_at_the_top(self):
        got = at_sla(sweep(point(0, 4, 10.0, 1.0), point(1, 16, 20.0, 1.0)), 0.99, SLOS)
        assert got["capacity_rps"] == 20.0 and got["basis"].startswith("at top")

    def test_no_stage_passing_is_no_capacity(self):
        got = at_sla(sweep(point(0, 4, 10.0, 0.9), point(1, 16, 20.0, 0.1)), 0.99, SLOS)
        assert got["capacity_rps"] is None and got["basis"] == "below the first stage"

    def test_stages_are_read_in_the_order_of_their_load(self):
        """Points listed out of order are sorted by offered load first."""
        got = at_sla(sweep(point(1, 16, 20.0, 0.5), point(0, 4, 10.0, 1.0)), 0.99, SLOS)
        assert got["capacity_rps"] == pytest.approx(10.2)

    def test_a_capacity_search_gives_its_own_answer(self):
        summary = {"capacity": {"capacity_rps": 31.0, "goodput_rps": 30.8, "output_tokens_per_s": 2000.0}}
        want = {"capacity_rps": 31.0, "goodput_rps": 30.8, "output_tokens_per_s": 2000.0}
        got = at_sla(summary, 0.99, SLOS)
        assert got == {**want, "energy_per_output_token_j": None, "basis": "capacity search"}

    def test_energy_per_token_is_read_at_the_crossing(self):
        """Stages of 0.2 and 0.4 J per output token, the SLA crossed halfway in attainment: 0.3."""
        a, b = point(0, 8, 10.0, 1.0), point(1, 16, 20.0, 0.98)
        summary = sweep(a, b)
        summary["stages"] = [
            {"index": 0, "telemetry": {"energy": {"j_per_output_token": 0.2}}},
            {"index": 1, "telemetry": {"energy": {"j_per_output_token": 0.4}}},
        ]
        got = at_sla(summary, 0.99, SLOS)
        assert got["basis"] == "crossing" and got["energy_per_output_token_j"] == pytest.approx(0.3)

    def test_without_attainment_the_percentiles_decide(self):
        """Another tool's stages carry p99s, not per-request flags: p99 within every bound passes."""
        a = {**point(0, 1, 5.0, None), "ttft_ms": {"p99": 300.0}, "tpot_ms": {"p99": 20.0}}
        b = {**point(1, 2, 9.0, None), "ttft_ms": {"p99": 900.0}, "tpot_ms": {"p99": 30.0}}
        got = at_sla(sweep(a, b), 0.99, SLOS)
        assert got["capacity_rps"] == 5.0 and got["basis"] == "highest passing stage"


def config(cid, capacities, cost=None):
    return ConfigRuns(
        cid, cid, [sweep(point(0, 4, c, 1.0), point(1, 16, 2 * c, 0.0)) for c in capacities], cost
    )


class TestRank:
    def test_separated_intervals_rank_and_say_so(self):
        """Means 20 and 10 with sd 0.5: intervals far apart, the first beats the second."""
        r = rank(
            [config("slow", [10.0, 10.5, 9.5]), config("fast", [20.0, 20.5, 19.5], cost=2.0)], 0.99, SLOS
        )
        first, second = r["rows"]
        assert (first["config"], second["config"]) == ("fast", "slow")
        assert first["versus_next"] == {
            "distinguishable": True,
            "repeats_needed": None,
            "text": "intervals separate",
        }
        cap = first["figures"]["capacity_rps"]
        assert cap["mean"] == pytest.approx(20.0 * 1.01)  # the crossing 1 % of the way to 2x, each repeat
        assert cap["low"] < cap["mean"] < cap["high"]
        # $ per million output tokens: 2 $/h / 3600 / (capacity x 64 + 1 % of the step) x 1e6
        usd = first["figures"]["usd_per_million_output_tokens"]["mean"]
        assert usd == pytest.approx(2.0 / 3600 / (20.2 * 64) * 1e6, rel=0.02)
        assert second["versus_next"] is None

    def test_overlapping_intervals_are_not_distinguishable(self):
        """Means 10.2 and 10.0 with sd ~0.5 overlap; the ranking says how many repeats would do."""
        r = rank([config("a", [10.0, 10.6, 10.0]), config("b", [9.5, 10.5, 10.0])], 0.99, SLOS)
        vs = r["rows"][0]["versus_next"]
        assert vs["distinguishable"] is False
        assert vs["text"].startswith("not distinguishable from the next; ")
        assert vs["repeats_needed"] is None or vs["repeats_needed"] > 3

    def test_a_configuration_without_capacity_ranks_last(self):
        r = rank([config("none", []), config("some", [5.0, 5.0])], 0.99, SLOS)
        assert [x["config"] for x in r["rows"]] == ["some", "none"]


class TestRepeatsToSeparate:
    def test_a_clear_difference_needs_few(self):
        """d = 2, sd 0.5 each: t(n-1) x 1 / sqrt(n) < 2 first at n = 4 (t(3) = 3.18: 1.59)."""
        a, b = TInterval(3, 12.0, 0.5, None, None), TInterval(3, 10.0, 0.5, None, None)
        assert repeats_to_separate(a, b) == 4

    def test_no_difference_never_separates(self):
        a = TInterval(3, 10.0, 0.5, None, None)
        assert repeats_to_separate(a, a) is None
