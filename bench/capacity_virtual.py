"""`loadgen capacity`'s search, run in virtual time against the simulator's engine, beside the
simulator's own answer: how far from the truth does the search land, and does its interval cover it?

Issue 20's question. The search (``runner/capacity_search.Search``) and its stages
(``runner/capacity_stages.CapacityPlan``: the stage lengths, the measure of each stage, the
over-saturation verdict, the capacity block) are loadgen's own code; only the stages are not run
over sockets: each is a Poisson schedule of the profile's lengths (loadgen's own sampler and
seed), served by ``loadgen.sim.simulate`` in virtual time, and its records built from the
sequences' virtual timestamps. So a seed costs about a second, and 20 seeds show the search's
bias and its interval's coverage, which one real-time run cannot.

The truth is the simulator's alone: Poisson arrivals at a grid of rates for ``--truth-s``
simulated seconds each (the first minute dropped), the long-run fraction of requests meeting
every SLO, and the rate where it crosses the attainment, linear between the grid's neighbours.

    python bench/capacity_virtual.py                         # the chat cliff case, 20 seeds
    python bench/capacity_virtual.py --seeds 5 --truth-s 600 --preset llama3-8b-fp8@h100

Measured (the chat profile on llama3-8b-fp16@h100, p99 TTFT < 700 ms and p99 TPOT < 50 ms at
99 %, 20 seeds, 43 s): the truth is 32.68 req/s; the search with the over-saturation verdict
lands within 3 % in 7 of 20 seeds (median +3.7 %, -3.7 % to +12.3 %) and its interval covers the
truth in 3 of 20: 15 s stages from idle near the engine's saturation throughput (about 35 req/s)
still pass. Issue 20 asks for 19 of 20 on both.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.config import load_profile
from loadgen.config.shipped import resolve_profile
from loadgen.records import RequestRecord
from loadgen.runner.capacity_search import Search
from loadgen.runner.capacity_stages import CapacityPlan, capacity_block
from loadgen.runner.driver import DriveResult
from loadgen.runner.plan import StageOutcome
from loadgen.sim import SimConfig, simulate
from loadgen.workload.lengths import sample_lengths


class Virtual:
    """The profile's lengths served by the simulator's engine on a virtual clock."""

    def __init__(self, profile: str, preset: str, slos: dict[str, float]) -> None:
        work = load_profile(resolve_profile(profile)).workload
        self.inputs, self.outputs = work.input_tokens, work.output_tokens
        self.config = SimConfig.from_dict({"preset": preset})
        self.slos = slos

    def serve(self, rate: float, seconds: float, seed: int) -> tuple[np.ndarray, list]:
        """Poisson arrivals at ``rate`` for ``seconds`` (ns) and the engine's sequences."""
        rng = np.random.default_rng(seed)
        n = int(rate * seconds * 1.3) + 50
        arrivals = np.cumsum(rng.exponential(1e9 / rate, n))
        arrivals = arrivals[arrivals < seconds * 1e9].astype(np.int64)
        prompts = sample_lengths(self.inputs, arrivals.size, rng)
        outputs = sample_lengths(self.outputs, arrivals.size, rng)
        seqs = simulate(
            self.config, [(int(a), int(p), int(o)) for a, p, o in zip(arrivals, prompts, outputs)]
        )
        return arrivals, seqs

    def good(self, arrivals: np.ndarray, seqs: list) -> np.ndarray:
        ttft = np.array([(s.token_vns[0] - a) / 1e6 for a, s in zip(arrivals, seqs)])
        tpot = np.array(
            [(s.token_vns[-1] - s.token_vns[0]) / 1e6 / max(len(s.token_vns) - 1, 1) for s in seqs]
        )
        return (ttft <= self.slos.get("ttft_ms", np.inf)) & (tpot <= self.slos.get("tpot_ms", np.inf))

    def stage(self, stage, seed: int) -> StageOutcome:
        """One stage of the plan as if the runner had run it: its records, its result."""
        arrivals, seqs = self.serve(stage.rate, stage.duration_s, seed)
        records = []
        for i, (a, s) in enumerate(zip(arrivals, seqs)):
            r = RequestRecord(i, i < stage.warmup_requests, int(a), int(a), s.output_len, s.prompt_len)
            first, last = int(s.token_vns[0]), int(s.token_vns[-1])
            r.ok, r.t_first_token_ns, r.t_end_ns, r.stage = True, first, last, stage.index
            r.output_tokens, r.prompt_tokens = len(s.token_vns), s.prompt_len
            r.chunk_times_ns = [first, last] if last > first else [first]
            r.chunk_tokens = [1, len(s.token_vns) - 1] if last > first else [1]
            records.append(r)
        ended = max([int(stage.duration_s * 1e9)] + [r.t_end_ns for r in records])  # the drain too
        return StageOutcome(stage, DriveResult(records, 0, ended, False))

    def truth(self, target: float, rates: np.ndarray, seconds: float) -> float:
        """The simulator's own answer (see the module's doc), in req/s."""
        attained = []
        for rate in rates:
            arrivals, seqs = self.serve(float(rate), seconds, int(rate * 100))
            keep = arrivals > 60e9
            attained.append(float(self.good(arrivals, seqs)[keep].mean()))
        a = np.array(attained)
        i = int(np.argmax(a < target))
        if i == 0 or not (a[i:] < target).all():
            raise SystemExit(f"the grid {rates} does not bracket the crossing: {np.round(a, 4)}")
        return float(rates[i - 1] + (a[i - 1] - target) / (a[i - 1] - a[i]) * (rates[i] - rates[i - 1]))


def search(v: Virtual, target: float, seed: int, **kw) -> tuple[dict, float]:
    """The plan's search to its end, every stage served in virtual time; (block, simulated s,
    drains included: what the search would take in real time)."""
    s_kw = {k: kw.pop(k) for k in ("max_stages", "precision") if k in kw}
    plan = CapacityPlan(Search(1.0, target, **s_kw), v.slos, seed=seed, **kw)
    done: list[StageOutcome] = []
    while (stage := plan.next_stage(done)) is not None:
        done.append(v.stage(stage, seed * 1000 + len(done)))
    simulated = sum((o.result.ended_ns - o.result.started_ns) / 1e9 for o in done)
    return dict(capacity_block(plan, None, seed, "")), simulated


def _r(x: float | None) -> str:
    return "none" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="chat")
    ap.add_argument("--preset", default="llama3-8b-fp16@h100")
    ap.add_argument("--ttft-ms", type=float, default=700.0)
    ap.add_argument("--tpot-ms", type=float, default=50.0)
    ap.add_argument("--attainment", type=float, default=0.99)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--max-stages", type=int, default=14)
    ap.add_argument("--precision", type=float, default=0.05)
    ap.add_argument("--budget-s", type=float, default=None)
    ap.add_argument("--truth", type=float, default=None, help="skip computing the truth: use this")
    ap.add_argument("--truth-s", type=float, default=1200.0, help="simulated seconds per truth rate")
    ap.add_argument("--grid", default="30:37:0.5", help="truth rates, start:stop:step req/s")
    a = ap.parse_args()
    v = Virtual(a.profile, a.preset, {"ttft_ms": a.ttft_ms, "tpot_ms": a.tpot_ms})
    lo, hi, step = (float(x) for x in a.grid.split(":"))
    truth = a.truth or v.truth(a.attainment, np.arange(lo, hi + step / 2, step), a.truth_s)
    print(f"the simulator's own answer: {truth:.2f} req/s")
    errors, covered = [], 0
    for seed in range(a.seeds):
        t0 = time.perf_counter()
        cap, simulated = search(
            v, a.attainment, seed, max_stages=a.max_stages, precision=a.precision, budget_s=a.budget_s
        )
        ci = cap["ci95"]
        inside = (ci[0] or 0.0) <= truth <= (ci[1] or np.inf)
        errors.append(cap["capacity_rps"] / truth - 1 if cap["capacity_rps"] else np.nan)
        covered += inside
        print(
            f"seed {seed:2d}: {cap['capacity_rps']:.2f} req/s ({errors[-1]:+.1%}), "
            f"CI {_r(ci[0])}-{_r(ci[1])} {'covers' if inside else 'misses'}, "
            f"{len(cap['stages'])} stages, {simulated:.0f} s simulated, "
            f"{time.perf_counter() - t0:.1f} s; {cap['stopped_because'] or 'ended on its rules'}"
        )
    e = np.array(errors)
    print(
        f"within 3 %: {int((np.abs(e) <= 0.03).sum())} of {a.seeds}; interval covers: {covered} of "
        f"{a.seeds}; error median {np.nanmedian(e):+.1%}, range {np.nanmin(e):+.1%} to {np.nanmax(e):+.1%}"
    )


if __name__ == "__main__":
    main()
