"""The twin that proposes the rate to confirm: the simulator fitted to the search's own stages,
searched in virtual time for long enough to be exact.

Why a twin. The search's stages are short (a 4-minute budget leaves it a minute and a half once
the confirmation is held back), and on a saturation cliff a short stage cannot tell 0.97 x the
truth from 1.03 x. But each stage's requests, their arrival times and lengths, and the TTFT and
TPOT the server gave them pin the server's physics (its bandwidth and compute efficiencies and
step cost: ``analysis/sim_fit.py`` replays each stage in virtual time), and a fitted simulator
can then be run for as long as it takes.

What it proposes. Not the long-run crossing of attainment (a run of a few minutes at that rate
holds about half the time) but the rate a confirmation holds at 19 times in 20 (``HOLD``): a
4-minute budget pays for one confirmation, not for a second after a failed first. ``RUNS``
virtual confirmations (Poisson from idle, the plan's warm-up, then its ``confirm_s``; lengths
redrawn from the pairs the search's stages served; the fitted client-to-engine latency added
to TTFT), each judged by the confirmation's own rule (``capacity_confirm.judge``) and each
searched for its own threshold, the highest rate at which it holds: one run keeps its schedule
at every rate (its unit-rate arrivals scaled), so its verdict turns once as the rate rises,
and the threshold is that turn, to ``PRECISION``. The proposal is the thresholds' 5 %
quantile (only the lowest few are searched for: ``sustained``). Bisecting for a rate at which
all of N fresh runs hold instead lands anywhere between the rates where 85 % and 99 % of
confirmations hold: the TPOT-bound case's proposals spread over 0.85 to 0.90 x the truth that
way. Where the fit is rejected (the stages do not pin the
physics, or it does not reproduce them within ``sim_fit``'s bound) the twin says why and the
search's own level is confirmed instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from loadgen.analysis import sim_fit
from loadgen.config import LengthDist, Profile
from loadgen.records import CANCELLED
from loadgen.runner.capacity_confirm import judge
from loadgen.runner.capacity_stages import Proposal
from loadgen.runner.plan import StageOutcome
from loadgen.sim import SimConfig, SimConfigError, simulate
from loadgen.summary.stages import CapacityTwin
from loadgen.workload.lengths import sample_lengths

if TYPE_CHECKING:
    from loadgen.runner.capacity_stages import CapacityPlan

RUNS = 12
HOLD = 0.95  # the confirmation must hold 19 times in 20: a budget rarely pays for a second
PRECISION = 0.01
STEP = 1.1
OFF = "off"


def twin_for(profile: Profile, slos: dict[str, float], target: float, preset: str | None) -> Twin | None:
    """The twin of ``profile``'s server: the built-in simulator's own preset and settings (the
    fit sets only the efficiencies), or ``preset`` for a real server (None: no twin for a URL;
    "off": none at all)."""
    if preset == OFF:
        return None
    if profile.target.url is None:
        base = {
            k: v for k, v in dict(profile.sim).items() if k not in (*sim_fit.FITTABLE, "time_scale", "seed")
        }
        if preset is not None:
            base["preset"] = preset
        base.setdefault("preset", SimConfig().preset)
        scale = float(dict(profile.sim).get("time_scale", 1.0))
    elif preset is None:
        return None
    else:
        base, scale = {"preset": preset}, 1.0
    try:
        SimConfig.from_dict(base)
    except SimConfigError as exc:
        raise ValueError(f"--twin {preset}: {exc}") from None
    work = profile.workload
    plain = all(getattr(work, k, None) is None for k in ("dataset", "trace", "tasks", "prefix", "sessions"))
    lengths = (work.input_tokens, work.output_tokens) if plain else None
    return Twin(base, slos, target, scale, lengths)


class Twin:
    """The fitted simulator's proposal (see the module's doc)."""

    def __init__(
        self,
        base: dict[str, Any],
        slos: dict[str, float],
        target: float,
        time_scale: float = 1.0,
        lengths: tuple[LengthDist, LengthDist] | None = None,
    ):
        self.base, self.slos, self.target, self.time_scale = base, slos, target, time_scale
        self.lengths = lengths  # the workload's (prompt, output) distributions, when it has them

    def propose(self, outcomes: Sequence[StageOutcome], plan: CapacityPlan) -> Proposal:
        t0 = time.perf_counter()
        search = [o for o in outcomes if o.stage.index not in plan.confirm_stages]
        try:
            fitted = self.fit(search)
        except sim_fit.FitError as exc:
            return Proposal(None, "twin", {"fitted": False, "why": str(exc)})
        config = {**fitted.config_fields(), "time_scale": 0}
        pairs, exact = _pairs(search)
        lo, hi = plan.search.bracket()
        warm, _ = plan.warm()  # the confirmation's warm-up
        # Every request served the lengths it asked: the workload's distributions are the
        # population, and drawing from a few hundred served pairs would bias every run alike
        # (a lognormal's sample mean of 400 strays 3 %, and capacity with it).
        draw = self.lengths if exact else None
        deadline = t0 + plan.twin_seconds()
        if time.perf_counter() > deadline:
            return Proposal(
                None, "twin", {"fitted": True, "why": "the fit took the twin's share of the budget"}
            )
        rate, how = self.sustained(
            config, pairs, fitted.request_latency_ms, plan.confirm_s, warm, lo, hi, draw, deadline
        )
        detail = CapacityTwin(
            fitted=True,
            preset=self.base["preset"],
            params={k: round(v, 5) for k, v in fitted.params.items()},
            request_latency_ms=round(fitted.request_latency_ms, 3),
            max_residual_pct=round(fitted.max_residual_pct(), 2),
            stages_fitted=len(fitted.source.stages),
            rate=rate,
            **how,
            seconds=round(time.perf_counter() - t0, 1),
        )
        return Proposal(rate, "twin", detail)

    def fit(self, outcomes: Sequence[StageOutcome]) -> sim_fit.Fit:
        """The simulator fitted to the search's stages (open loop, replayed in virtual time)."""
        stages, skipped = [], []
        for o in outcomes:
            stage = sim_fit.stage_from_table(o.stage.name, o.table(), None, self.time_scale)
            if stage is None:
                skipped.append(o.stage.name)
            else:
                stages.append(stage)
        source = sim_fit.FitInput(None, None, dict(self.base), stages, skipped, None)
        return sim_fit.fit(source, sim_fit.PARAMS, drop_weak=True)

    def sustained(
        self,
        config: dict[str, Any],
        pairs: np.ndarray,
        latency_ms: float,
        confirm_s: float,
        warm_s: float,
        lo: float | None,
        hi: float | None,
        lengths: tuple[LengthDist, LengthDist] | None = None,
        deadline: float = math.inf,
    ) -> tuple[float | None, CapacityTwin]:
        """The rate at which a confirmation holds with probability ``HOLD``: each of ``RUNS``
        virtual confirmations' own highest holding rate (its threshold), and their ``1 - HOLD``
        quantile; with what it rests on. Past ``deadline`` (``time.perf_counter``) no further
        run is tried: the quantile is of the runs tried."""
        sim = SimConfig.from_dict(config)
        top = 4 * (hi if hi is not None else 2 * (lo or 1.0))
        floor = (lo or top / 8) / 16
        runs = [_Schedule(k, pairs, (warm_s + confirm_s) * top * 1.3 + 50, lengths) for k in range(RUNS)]
        evaluations = 0

        def holds(run: _Schedule, rate: float) -> bool:
            nonlocal evaluations
            evaluations += 1
            return self._confirms(sim, run, latency_ms, rate, confirm_s, warm_s)

        # Only the lowest thresholds decide a 5 % quantile: run 0's is found whole for the
        # scale, then every run is tried at a level below it, and only a run that fails there
        # is searched down to its own threshold (one that holds is known to lie above); the
        # level rises until enough runs fail below it to pin the quantile.
        need = math.floor((1 - HOLD) * (RUNS - 1)) + 2  # the order statistics it interpolates
        exact = {0: _threshold(lambda r: holds(runs[0], r), lo or top / 8, floor, top)}
        level, above, prev = exact[0] / STEP, list(range(1, RUNS)), None
        late = False
        while True:
            still, untried = [], []
            for i, k in enumerate(above):
                if time.perf_counter() > deadline:  # the confirmation's time: stop with what is known
                    untried, late = above[i:], True
                    break
                if holds(runs[k], level):
                    still.append(k)
                else:
                    exact[k] = _threshold(lambda r, k=k: holds(runs[k], r), level, floor, top, fails_at=level)
            if late:  # an untried run held at the level before (it lies above that), or is unknown
                levels = [level] * len(still) + ([prev] * len(untried) if prev is not None else [])
                break
            above = still
            if sum(t < level for t in exact.values()) >= need or not above or level >= top:
                levels = [level] * len(above)
                break
            prev, level = level, level * (1 + 3 * PRECISION)
        thresholds = sorted([*exact.values(), *levels])
        rate = float(np.quantile(thresholds, 1 - HOLD))
        detail = CapacityTwin(
            lowest_thresholds=[round(t, 3) for t in thresholds[:need]],
            runs=len(thresholds),
            out_of_time=late,
            hold=HOLD,
            confirmations_run=evaluations,
            lengths="the workload's distributions" if lengths else f"{len(pairs)} served pairs",
        )
        return (float(f"{rate:.4g}") if rate > floor else None), detail

    def _confirms(
        self, sim: SimConfig, run: _Schedule, latency_ms: float, rate: float, confirm_s: float, warm_s: float
    ) -> bool:
        """One virtual confirmation at ``rate`` on ``run``'s schedule held. Rates, durations
        and SLOs are the wall clock's; the twin runs in the simulator's own time, which a
        ``time_scale`` stretches (wall = virtual x scale) and the fitted latency is measured in."""
        scale = self.time_scale
        seconds = (warm_s + confirm_s) / scale
        arrivals = run.unit_arrivals / (rate * scale)  # virtual s
        n = int(np.searchsorted(arrivals, seconds))
        work = [(int(a * 1e9), int(p), int(o)) for a, (p, o) in zip(arrivals[:n], run.pairs[:n])]
        seqs = simulate(sim, work)
        warm = round(rate * warm_s)
        good = np.ones(max(0, len(seqs) - warm), dtype=bool)
        bound = {m: self.slos.get(m, math.inf) / scale for m in ("ttft_ms", "tpot_ms", "e2e_ms")}
        for i, s in enumerate(seqs[warm:]):
            t = s.token_vns or []
            ttft = (t[0] - s.arrival_vns) / 1e6 + latency_ms
            tpot = (t[-1] - t[0]) / 1e6 / max(len(t) - 1, 1)
            e2e = (t[-1] - s.arrival_vns) / 1e6 + latency_ms
            good[i] = ttft <= bound["ttft_ms"] and tpot <= bound["tpot_ms"] and e2e <= bound["e2e_ms"]
        c = judge(
            0,
            rate,
            good,
            measured_s=confirm_s,
            in_flight=1.0,
            over_saturated=False,
            target=self.target,
            seed=run.k,
        )
        return c.held


class _Schedule:
    """Run ``k``'s arrivals at unit rate and its requests' lengths: the same run at every rate
    (its arrivals scaled), so that its threshold is one crossing, not a coin toss per rate."""

    def __init__(
        self, k: int, pairs: np.ndarray, most: float, lengths: tuple[LengthDist, LengthDist] | None
    ) -> None:
        rng = np.random.default_rng([k, 17])
        n = int(most)
        self.k = k
        self.unit_arrivals = np.cumsum(rng.exponential(1.0, n))
        if lengths is None:
            self.pairs = pairs[rng.integers(0, len(pairs), n)]
        else:
            self.pairs = np.column_stack(
                [sample_lengths(lengths[0], n, rng), sample_lengths(lengths[1], n, rng)]
            )


def _threshold(holds: Any, guess: float, floor: float, top: float, fails_at: float | None = None) -> float:
    """The highest rate at which ``holds`` (one run's confirmation), to ``PRECISION``, from a
    bracket around ``guess`` widened by ``STEP`` until it brackets (``fails_at``: a rate known
    to fail, the bracket's top); ``floor`` when even that fails, ``top`` when that holds."""
    lo, hi = guess / STEP, guess * STEP if fails_at is None else fails_at
    while not holds(lo):
        lo, hi = lo / STEP, lo
        if lo < floor:
            return floor
    while fails_at is None and holds(hi):
        lo, hi = hi, hi * STEP
        if hi > top:
            return top
    while hi / lo - 1 > PRECISION:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def _pairs(outcomes: Sequence[StageOutcome]) -> tuple[np.ndarray, bool]:
    """(prompt tokens, output tokens) of every request the stages sent that reached the server:
    an ok one's as served, one the stage's drain limit cut as it asked (an over-saturated
    screen's cut requests are its long ones: leaving them out would shorten every answer); and
    whether every ok one was served exactly the lengths it asked for."""
    out, exact = [], True
    for o in outcomes:
        t = o.table()
        ok = t.column("ok").astype(bool)
        keep = ok | (t.column("error_class") == CANCELLED)
        prompt, has_prompt = t.ints("prompt_tokens")
        prompt = np.where(has_prompt, prompt, t.column("requested_prompt_tokens"))
        output, has_output = t.ints("output_tokens")
        output = np.where(ok & has_output, output, t.column("requested_output_tokens"))
        asked = (prompt == t.column("requested_prompt_tokens")) & (
            output == t.column("requested_output_tokens")
        )
        exact = exact and bool(asked[ok].all())
        out.append(np.column_stack([prompt[keep], output[keep]]))
    pairs = np.concatenate(out) if out else np.zeros((0, 2))
    pairs = pairs[(pairs[:, 0] >= 1) & (pairs[:, 1] >= 1)]
    return pairs.astype(np.int64), exact
