"""The twin that proposes the rate to confirm: the simulator fitted to the search's own stages,
searched in virtual time for long enough to be exact.

Why a twin. The search's stages are short (a 4-minute budget leaves it a minute and a half once
the confirmation is held back), and on a saturation cliff a short stage cannot tell 0.97 x the
truth from 1.03 x. But each stage's requests, their arrival times and lengths, and the TTFT and
TPOT the server gave them pin the server's physics (its bandwidth and compute efficiencies and
step cost: ``analysis/sim_fit.py`` replays each stage in virtual time), and a fitted simulator
can then be run for as long as it takes.

What it proposes. Not the long-run crossing of attainment (a run of a few minutes at that rate
holds about half the time) but the rate a confirmation is likely to hold at: at each candidate
rate, ``RUNS`` virtual confirmations (Poisson from idle, the plan's warm-up, then its
``confirm_s``; lengths redrawn from the pairs the search's stages served; the fitted
client-to-engine latency added to TTFT), each judged by the confirmation's own rule
(``capacity_confirm.judge``); the highest rate at which every one held, found by bisection to
``PRECISION``, one ``PRECISION`` lower. Where the fit is rejected (the stages do not pin the
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
from loadgen.config import Profile
from loadgen.records import CANCELLED
from loadgen.runner.capacity_confirm import judge
from loadgen.runner.capacity_stages import Proposal
from loadgen.runner.plan import StageOutcome
from loadgen.sim import SimConfig, SimConfigError, simulate

if TYPE_CHECKING:
    from loadgen.runner.capacity_stages import CapacityPlan

RUNS = 12
PRECISION = 0.015
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
    return Twin(base, slos, target, scale)


class Twin:
    """The fitted simulator's proposal (see the module's doc)."""

    def __init__(self, base: dict[str, Any], slos: dict[str, float], target: float, time_scale: float = 1.0):
        self.base, self.slos, self.target, self.time_scale = base, slos, target, time_scale

    def propose(self, outcomes: Sequence[StageOutcome], plan: CapacityPlan) -> Proposal:
        t0 = time.perf_counter()
        search = [o for o in outcomes if o.stage.index not in plan.confirm_stages]
        try:
            fitted = self.fit(search)
        except sim_fit.FitError as exc:
            return Proposal(None, "twin", {"fitted": False, "why": str(exc)})
        config = {**fitted.config_fields(), "time_scale": 0}
        pairs = _pairs(search)
        lo, hi = plan.search.bracket()
        warm, _ = plan.warm()  # the confirmation's warm-up
        rate, tried = self.sustained(config, pairs, fitted.request_latency_ms, plan.confirm_s, warm, lo, hi)
        detail = {
            "fitted": True,
            "preset": self.base["preset"],
            "params": {k: round(v, 5) for k, v in fitted.params.items()},
            "request_latency_ms": round(fitted.request_latency_ms, 3),
            "max_residual_pct": round(max(abs(r) for row in fitted.residuals_pct() for r in row.values()), 2),
            "stages_fitted": len(fitted.source.stages),
            "rate": rate,
            "tried": tried,
            "runs_per_rate": RUNS,
            "seconds": round(time.perf_counter() - t0, 1),
        }
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
    ) -> tuple[float | None, list[list[float]]]:
        """The highest rate at which every one of ``RUNS`` virtual confirmations held, one
        ``PRECISION`` lower; and each rate tried with the fraction that held."""
        sim = SimConfig.from_dict(config)
        tried: list[list[float]] = []

        def holds(rate: float) -> bool:
            held = 0
            for k in range(RUNS):
                held += self._confirms(sim, pairs, latency_ms, rate, confirm_s, warm_s, k)
                if held < k + 1:  # one failed: not every run holds here
                    tried.append([rate, held / (k + 1)])
                    return False
            tried.append([rate, 1.0])
            return True

        top = hi if hi is not None else 2 * (lo or 1.0)
        good = lo or top / 4
        while not holds(good):  # the search's passing level, or below it: a rate the twin holds
            good /= 2
            if good < top / 64:
                return None, tried
        bad = top
        for _ in range(4):  # every run held up to the search's failing level: look above it
            if not holds(bad):
                break
            good, bad = bad, 2 * bad
        else:
            return float(f"{good:.4g}"), tried
        while bad / good - 1 > PRECISION:
            mid = math.sqrt(good * bad)
            if holds(mid):
                good = mid
            else:
                bad = mid
        return float(f"{good * (1 - PRECISION):.4g}"), tried

    def _confirms(
        self, sim: SimConfig, pairs: np.ndarray, latency_ms: float, rate: float, confirm_s: float,
        warm_s: float, k: int,
    ) -> bool:  # fmt: skip
        """One virtual confirmation at ``rate`` (run ``k``'s schedule) held. Rates, durations
        and SLOs are the wall clock's; the twin runs in the simulator's own time, which a
        ``time_scale`` stretches (wall = virtual x scale) and the fitted latency is measured in."""
        rng = np.random.default_rng([int(rate * 1000), k, 17])
        scale = self.time_scale
        seconds = (warm_s + confirm_s) / scale
        virtual_rate = rate * scale
        n = int(virtual_rate * seconds * 1.3) + 50
        arrivals = np.cumsum(rng.exponential(1e9 / virtual_rate, n))
        arrivals = arrivals[arrivals < seconds * 1e9].astype(np.int64)
        drawn = pairs[rng.integers(0, len(pairs), arrivals.size)]
        seqs = simulate(sim, [(int(a), int(p), int(o)) for a, (p, o) in zip(arrivals, drawn)])
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
            seed=k,
        )
        return c.held


def _pairs(outcomes: Sequence[StageOutcome]) -> np.ndarray:
    """(prompt tokens, output tokens) of every request the stages sent that reached the server:
    an ok one's as served, one the stage's drain limit cut as it asked (an over-saturated
    screen's cut requests are its long ones: leaving them out would shorten every answer)."""
    out = []
    for o in outcomes:
        t = o.table()
        ok = t.column("ok").astype(bool)
        keep = ok | (t.column("error_class") == CANCELLED)
        prompt, has_prompt = t.ints("prompt_tokens")
        prompt = np.where(has_prompt, prompt, t.column("requested_prompt_tokens"))
        output, has_output = t.ints("output_tokens")
        output = np.where(ok & has_output, output, t.column("requested_output_tokens"))
        out.append(np.column_stack([prompt[keep], output[keep]]))
    pairs = np.concatenate(out) if out else np.zeros((0, 2))
    pairs = pairs[(pairs[:, 0] >= 1) & (pairs[:, 1] >= 1)]
    return pairs.astype(np.int64)
