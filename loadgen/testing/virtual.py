"""The capacity search in virtual time: loadgen's own plan, served by the simulator's engine.

A real-time search of a saturation cliff takes minutes, so one run cannot show how often the
search lands near the truth or how often its interval covers it; twenty in virtual time can.
Here the search (``runner.capacity_search.Search``) and its stages (``runner.capacity_stages.
CapacityPlan``: stage lengths, the measure of each stage, the over-saturation verdict, the
capacity block) are loadgen's own code. Only the stages do not go over sockets: each is a
Poisson schedule of the profile's lengths (the workload's own sampler), served by
``loadgen.sim.simulate`` on a virtual clock, and its records built from the sequences' virtual
timestamps, its drain included in the time it took.

``Virtual.truth`` is the simulator's own answer, computed without the search: Poisson arrivals at
a grid of rates for many simulated minutes each (the first minute dropped), the long-run fraction
of requests meeting every SLO, and the rate where it crosses the attainment, linear between the
grid's neighbours. ``bench/capacity_virtual.py`` and ``tests/slow/test_capacity_virtual.py`` use
both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.config import load_profile
from loadgen.config.shipped import resolve_profile
from loadgen.config.stages import Stage
from loadgen.records import CANCELLED, RequestRecord
from loadgen.runner.capacity_result import capacity_block
from loadgen.runner.capacity_search import Search
from loadgen.runner.capacity_stages import CapacityPlan
from loadgen.runner.capacity_twin import Twin
from loadgen.runner.driver import DriveResult
from loadgen.runner.plan import StageOutcome
from loadgen.sim import Seq, SimConfig, simulate
from loadgen.summary import Capacity
from loadgen.workload import stage_schedule
from loadgen.workload.lengths import sample_lengths

# What the twin's fit and search cost a real run's budget, counted here instead of this
# machine's wall time (measured on an idle 2-core machine: 20 to 40 s on the chat cliff case),
# so that a seed's result does not depend on how busy the machine running the harness is.
TWIN_TIME_S = 35.0


class Virtual:
    """A shipped profile's lengths served by a simulator preset's engine on a virtual clock,
    judged against per-request SLOs (``ttft_ms``, ``tpot_ms``)."""

    def __init__(self, profile: str, sim: dict[str, Any], slos: dict[str, float]) -> None:
        work = load_profile(resolve_profile(profile)).workload
        self.inputs, self.outputs = work.input_tokens, work.output_tokens
        self.sim = dict(sim)
        self.config = SimConfig.from_dict(sim)
        self.slos = slos

    def serve(
        self, rate: float, seconds: float, seed: int, arrivals: np.ndarray | None = None
    ) -> tuple[np.ndarray, list[Seq]]:
        """Poisson arrivals (virtual ns) at ``rate`` for ``seconds`` (or ``arrivals``), each with
        the workload's lengths, and the engine's sequences."""
        rng = np.random.default_rng(seed)
        if arrivals is None:
            n = int(rate * seconds * 1.3) + 50
            arrivals = np.cumsum(rng.exponential(1e9 / rate, n))
            arrivals = arrivals[arrivals < seconds * 1e9].astype(np.int64)
        prompts = sample_lengths(self.inputs, arrivals.size, rng)
        outputs = sample_lengths(self.outputs, arrivals.size, rng)
        work = [(int(a), int(p), int(o)) for a, p, o in zip(arrivals, prompts, outputs)]
        return arrivals, simulate(self.config, work)

    def good(self, arrivals: np.ndarray, seqs: Sequence[Seq]) -> np.ndarray:
        """Each request's SLO verdict, from its first and last token's virtual times."""
        times = [_times(s) for s in seqs]
        ttft = np.array([(t[0] - a) / 1e6 for a, t in zip(arrivals, times)])
        tpot = np.array([(t[-1] - t[0]) / 1e6 / max(len(t) - 1, 1) for t in times])
        return (ttft <= self.slos.get("ttft_ms", np.inf)) & (tpot <= self.slos.get("tpot_ms", np.inf))

    def stage(self, stage: Stage, seed: int) -> StageOutcome:
        """One stage of the plan as the runner would have run it (its schedule is the runner's,
        ``stage_schedule``): its records, its result."""
        assert stage.rate is not None and stage.duration_s is not None
        schedule = stage_schedule(stage, seed)
        arrivals, seqs = self.serve(stage.rate, stage.duration_s, seed, schedule)
        records = []
        # the stage's drain limit (Stage.drain_s): what is still in flight then is cancelled
        cut = None if stage.drain_s is None else int((stage.duration_s + stage.drain_s) * 1e9)
        for i, (a, s) in enumerate(zip(arrivals, seqs)):
            r = RequestRecord(i, i < stage.warmup_requests, int(a), int(a), s.output_len, s.prompt_len)
            times = _times(s)
            r.stage, r.prompt_tokens = stage.index, s.prompt_len
            if cut is not None and times[-1] > cut:
                times = [t for t in times if t <= cut]
                r.ok, r.error_class, r.t_end_ns = False, CANCELLED, cut
                r.t_first_token_ns = int(times[0]) if times else None
                r.output_tokens = len(times)
                records.append(r)
                continue
            first, last = int(times[0]), int(times[-1])
            r.ok, r.t_first_token_ns, r.t_end_ns = True, first, last
            r.output_tokens = len(times)
            r.chunk_times_ns = [first, last] if last > first else [first]
            r.chunk_tokens = [1, len(times) - 1] if last > first else [1]
            records.append(r)
        ended = max([int(stage.duration_s * 1e9)] + [r.t_end_ns or 0 for r in records])
        return StageOutcome(stage, DriveResult(records, 0, ended, False))

    def truth(self, target: float, rates: Sequence[float], seconds: float, runs: int = 1) -> float:
        """The simulator's own answer (see the module's doc), in req/s: ``runs`` runs of
        ``seconds`` per rate (a tail's long-run fraction moves by a few points from one 20-minute
        run to the next; the runs' requests are pooled)."""
        attained = []
        for rate in rates:
            good = []
            for run in range(runs):
                arrivals, seqs = self.serve(float(rate), seconds, int(rate * 100) + 7919 * run)
                good.append(self.good(arrivals, seqs)[arrivals > 60e9])
            attained.append(float(np.concatenate(good).mean()))
        a = np.array(attained)
        i = int(np.argmax(a < target))
        if i == 0 or not (a[i:] < target).all():
            raise ValueError(f"the grid {list(rates)} does not bracket the crossing: {np.round(a, 4)}")
        return float(rates[i - 1] + (a[i - 1] - target) / (a[i - 1] - a[i]) * (rates[i] - rates[i - 1]))

    def search(
        self,
        target: float,
        seed: int,
        *,
        start: float = 1.0,
        search: dict[str, Any] | None = None,
        twin: bool = True,
        **plan: Any,
    ) -> tuple[Capacity, float]:
        """The plan's search and confirmation to their end on ``seed``'s schedules (``search``:
        Search's keywords, ``plan``: CapacityPlan's; ``twin``: the fitted simulator proposes, as
        ``loadgen capacity --sim`` does); (its capacity block, the seconds it would take in real
        time: warm-ups, drains and the twin's own time included)."""
        proposer = Twin(self.sim, self.slos, target, lengths=(self.inputs, self.outputs)) if twin else None
        p = CapacityPlan(
            Search(start, target, **(search or {})),
            self.slos,
            seed=seed,
            proposer=proposer,
            proposer_time_s=TWIN_TIME_S,
            **plan,
        )
        done: list[StageOutcome] = []
        while (stage := p.next_stage(done)) is not None:
            done.append(self.stage(stage, seed * 1000 + len(done)))
        return capacity_block(p), p.spent_s

    def plain(self, rate: float, seconds: float, seed: int, warmup_s: float = 0.0) -> float:
        """The attainment of a plain Poisson run at ``rate`` from idle, of ``seconds`` measured
        after ``warmup_s`` (a user's ``loadgen run --rate`` at the rate a search confirmed)."""
        arrivals, seqs = self.serve(rate, warmup_s + seconds, seed)
        good = self.good(arrivals, seqs)
        return float(good[arrivals >= warmup_s * 1e9].mean())


def spread_start(seed: int) -> float:
    """A start rate of 1 to 2 req/s for ``seed``, spread by the golden ratio: the levels the
    doubling reaches move with it, so over many seeds the grid does not fall on the truth by luck."""
    return float(f"{2 ** ((seed * 0.618034) % 1):.3g}")


def _times(seq: Seq) -> list[int]:
    """A finished sequence's token times (``simulate`` runs every sequence to its end)."""
    assert seq.token_vns, "simulate() returns finished sequences"
    return seq.token_vns
