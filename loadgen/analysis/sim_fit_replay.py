"""A measured stage replayed in virtual time: what ``sim_fit`` compares, request by request.

A stage's figures depend on far more than its mean lengths: which requests arrive together
(a closed loop's first wave, a Poisson burst), how long each one's prompt and answer are, when
the stage stopped sending and what its end cut. So the prediction is not a stage of mean-length
requests but the stage itself: its own requests, in the order they were sent, each with its own
prompt and answer length, sent as the client sent them (``loadgen.sim.virtual_time.replay``):
at their recorded send times (open loop, and a closed loop's first wave) or each the instant a
user's last request ended (a closed loop), cut where the stage cut what it still had in flight.

Both sides' figures come out of one function, ``figures``, on the same request set (measured,
not warm-up; ok, finished before the cut), so a perfect twin has no residual but the pacing's
and the client's own noise. Times are virtual: a run the simulator served at ``time_scale`` s
has its times divided by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.analysis.table import RecordTable
from loadgen.records import CANCELLED
from loadgen.sim import SimConfig
from loadgen.sim.virtual_time import replay

# What a stage is measured and predicted by: the client's view of its latency (TTFT's middle
# and tail, TPOT's middle) and the server's output rate.
METRICS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "output_tokens_per_s")
# The least a figure's spread is taken to be (its log, one sigma): the pacing's and the client's
# own noise, which no count of requests averages away. The simulator's true efficiencies
# reproduce a real-time sweep's TPOT medians within 0.3 % (the guide's c=1..64 on an H100
# preset, 2026-12-06); a floor of 1 % let the TTFT tails outvote them and the step overhead
# went unidentified on a sweep that pins it.
MIN_SPREAD = 0.003
# Resamples of a stage's requests that measure each figure's spread.
SPREAD_RESAMPLES = 200
# A stage whose server failed more of its requests than this cannot be twinned: the simulator
# never refuses one, and what a refused request would have cost is unknown.
MAX_ERROR_SHARE = 0.05


@dataclass(frozen=True, eq=False)
class FitStage:
    """One stage as the replay sends it: its served requests in the order they were sent (the
    warm-up flagged), where it cut what was in flight, and its measured figures; virtual time.
    ``concurrency`` None is an open loop (each request at its send time)."""

    name: str
    concurrency: int | None
    prompts: np.ndarray  # prompt tokens of each request
    outputs: np.ndarray  # output tokens of each (what a cut one had asked for)
    sends_ns: np.ndarray  # send times from the stage's first schedule
    warmup: np.ndarray  # bool: left out of the figures
    measured: dict[str, float]
    opens: int = 0  # closed loop: requests sent at their own times (the first wave, a ramp's)
    cut_ns: int | None = None  # what was in flight then was cancelled (the stage's drain limit)
    # Closed loop: from an answer's last token to its user's next send, the stage's median (the
    # stream's end and the client's turnaround): the running step the next request waits for
    # has that much less left.
    resend_ns: int = 0
    # Each figure's spread (one sigma of its log, from resampling the stage's requests, at least
    # MIN_SPREAD): the fit weighs each residual by it, so a p99 of 8 requests, which one request
    # more or less moves by half, does not outweigh a TPOT median of thousands of tokens.
    spread: dict[str, float] = field(default_factory=lambda: dict.fromkeys(METRICS, MIN_SPREAD))

    @property
    def requests(self) -> int:
        """Measured (not warm-up) requests."""
        return int((~self.warmup).sum())

    @property
    def isl(self) -> int:
        """Mean prompt tokens of the measured requests."""
        return round(float(self.prompts[~self.warmup].mean()))

    @property
    def osl(self) -> int:
        """Mean output tokens of the measured requests."""
        return round(float(self.outputs[~self.warmup].mean()))

    @property
    def load(self) -> str:
        """``c=8`` or ``open``: how it was sent."""
        return "open" if self.concurrency is None else f"c={self.concurrency}"


def figures(
    sends: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    end: np.ndarray,
    outputs: np.ndarray,
    ok: np.ndarray,
    measured: np.ndarray,
) -> dict[str, float]:
    """The stage's ``METRICS`` from per-request times (ns, one clock) as the run's summary
    computes them: TTFT (first token - send) and TPOT ((last - first) / (tokens - 1), from 2
    tokens) over the measured ok requests, percentiles by numpy's linear rule; output tokens of
    those over the window from the first measured send to the last measured end (a cut
    request's end is the cut). NaN where a figure has no request."""
    served = ok & measured
    ttft = (first[served] - sends[served]) / 1e6
    two = served & (outputs >= 2)
    tpot = (last[two] - first[two]) / 1e6 / (outputs[two] - 1)
    window_s = (end[measured].max() - sends[measured].min()) / 1e9 if measured.any() else 0.0
    return {
        "ttft_p50_ms": float(np.percentile(ttft, 50)) if ttft.size else float("nan"),
        "ttft_p99_ms": float(np.percentile(ttft, 99)) if ttft.size else float("nan"),
        "tpot_p50_ms": float(np.percentile(tpot, 50)) if tpot.size else float("nan"),
        "output_tokens_per_s": float(outputs[served].sum() / window_s) if window_s > 0 else float("nan"),
    }


def read_stage(
    name: str, table: RecordTable, concurrency: int | None, time_scale: float = 1.0, ramp_s: float = 0.0
) -> tuple[FitStage | None, str]:
    """The stage of ``table``'s records (one stage's), or None and why it cannot be fitted.
    ``concurrency`` None: an open loop; ``ramp_s``: a closed loop's ramp, whose sends are
    replayed at their own times; ``time_scale``: the simulator's (times are divided by it)."""
    if not len(table):
        return None, "no requests"
    ok = table.column("ok").astype(bool)
    cancelled = table.column("error_class") == CANCELLED
    warm = table.column("warmup").astype(bool)
    failed = ~ok & ~cancelled
    if failed[~warm].sum() > MAX_ERROR_SHARE * max(1, int((~warm).sum())):
        return None, (
            f"{int(failed[~warm].sum())} of {int((~warm).sum())} requests failed: the simulator "
            "refuses none, so a stage its server refused cannot be twinned"
        )
    t = table.select(np.flatnonzero(ok | cancelled))  # what reached the server and held it
    t = t.select(np.argsort(t.column("t_send_ns"), kind="stable"))
    ok, cancelled = t.column("ok").astype(bool), t.column("error_class") == CANCELLED
    warm = t.column("warmup").astype(bool)
    t0 = int(table.column("t_sched_ns").min())
    first, has_first = t.ints("t_first_token_ns")
    last = t.column("t_last_chunk_ns")
    end, has_end = t.ints("t_end_ns")
    outputs, has_out = t.ints("output_tokens")
    outputs = np.where(ok & has_out, outputs, t.column("requested_output_tokens")).astype(np.int64)
    prompts, has_prompt = t.ints("prompt_tokens")
    prompts = np.where(has_prompt, prompts, t.column("requested_prompt_tokens")).astype(np.int64)
    served = ok & has_first & has_end
    sends = t.column("t_send_ns")
    times = (
        _virtual(sends, t0, time_scale),
        _virtual(np.where(has_first, first, sends), t0, time_scale),
        _virtual(np.where(served, last, sends), t0, time_scale),
        _virtual(np.where(has_end, end, sends), t0, time_scale),
    )
    measured = figures(*times, outputs, served, ~warm)
    if not all(v > 0 for v in measured.values()):  # NaN compares False too
        return None, "fewer than two finished requests with a first token and a TPOT"
    cut = None
    if cancelled.any():
        cut = int(_virtual(end[cancelled & has_end], t0, time_scale).min(initial=2**62))
    opens = 0
    if concurrency is not None:
        opens = min(concurrency, len(t))
        if ramp_s > 0:  # the ramp's sends are replayed as sent, the loop closes after it
            opens = max(opens, int((t.column("t_sched_ns") < t0 + ramp_s * 1e9).sum()))
    resend = 0
    if concurrency is not None:
        resend = _resend(t, opens, time_scale)
    stage = FitStage(
        name,
        concurrency,
        np.maximum(prompts, 1),
        np.maximum(outputs, 1),
        _virtual(sends, t0, time_scale),
        warm,
        measured,
        opens,
        cut,
        resend,
        spread(*times, outputs, served, ~warm),
    )
    return stage, ""


def spread(
    sends: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    end: np.ndarray,
    outputs: np.ndarray,
    ok: np.ndarray,
    measured: np.ndarray,
) -> dict[str, float]:
    """Each of ``figures``' spread: the standard deviation of its log over ``SPREAD_RESAMPLES``
    resamples of the measured requests (with replacement; a fixed seed, so a fit is
    reproducible), at least ``MIN_SPREAD``."""
    rng = np.random.default_rng(0)
    idx = np.flatnonzero(measured)
    logs: dict[str, list[float]] = {m: [] for m in METRICS}
    for _ in range(SPREAD_RESAMPLES):
        pick = np.sort(rng.choice(idx, idx.size))
        got = figures(
            sends[pick], first[pick], last[pick], end[pick], outputs[pick], ok[pick], measured[pick]
        )
        for m in METRICS:
            if got[m] > 0:
                logs[m].append(np.log(got[m]))
    return {m: max(MIN_SPREAD, float(np.std(v)) if len(v) > 1 else 1.0) for m, v in logs.items()}


def stage_from_table(
    name: str, table: RecordTable, concurrency: int | None, time_scale: float = 1.0, ramp_s: float = 0.0
) -> FitStage | None:
    """``read_stage``'s stage, or None when it cannot be fitted."""
    return read_stage(name, table, concurrency, time_scale, ramp_s)[0]


def predict(
    fields: dict[str, Any], stage: FitStage, latency_ms: float, serial_ms: float = 0.0
) -> dict[str, float]:
    """The stage's ``METRICS`` on the simulator of ``fields`` (SimConfig fields), its requests
    reaching the engine ``latency_ms`` after their sends (client to engine: HTTP, parsing)."""
    config = SimConfig.from_dict({**fields, "time_scale": 0})
    run = replay(
        config,
        stage.prompts,
        stage.outputs,
        sends_ns=stage.sends_ns,
        concurrency=stage.concurrency,
        opens=stage.opens,
        latency_ns=max(1, round(latency_ms * 1e6)),
        resend_ns=stage.resend_ns,
        serial_ns=round(serial_ms * 1e6),
        cut_ns=stage.cut_ns,
    )
    sent = run.send_ns >= 0
    ok = run.end_ns >= 0
    end = np.where(ok, run.end_ns, stage.cut_ns if stage.cut_ns is not None else run.send_ns)
    return figures(run.send_ns, run.first_ns, run.last_ns, end, stage.outputs, ok, sent & ~stage.warmup)


def _resend(t: RecordTable, opens: int, scale: float) -> int:
    """A closed loop's median time (virtual ns) from an answer's last chunk to its user's next
    send: each request after the first ``opens`` (``t``: in send order) was scheduled when its
    user's last one ended, the latest end at or before its schedule."""
    end, has_end = t.ints("t_end_ns")
    last = np.where(t.present("t_last_chunk_ns"), t.column("t_last_chunk_ns"), end)
    order = np.argsort(np.where(has_end, end, np.iinfo(np.int64).max), kind="stable")
    ends = np.where(has_end, end, np.iinfo(np.int64).max)[order]
    sched, sends = t.column("t_sched_ns")[opens:], t.column("t_send_ns")[opens:]
    k = np.searchsorted(ends, sched, side="right") - 1
    if not len(k) or (k < 0).all():
        return 0
    gaps = sends[k >= 0] - last[order][k[k >= 0]]
    return max(0, round(float(np.median(gaps)) / scale))


def _virtual(ns: np.ndarray, t0: int, scale: float) -> np.ndarray:
    """Wall-clock ns as virtual ns from ``t0``."""
    return np.round((ns.astype(np.int64) - t0) / scale).astype(np.int64)
