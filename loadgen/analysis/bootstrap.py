"""Bootstrap confidence intervals of run statistics, from the per-request records.

A run's statistic (p99 TTFT, output tokens/s, error rate, ...) is recomputed on resamples of
its measured requests drawn with replacement. A resample is a vector of counts (how often each
request was drawn), so every statistic is the same code with weights:

- a latency percentile or mean pools the samples of the drawn requests: a request drawn twice
  contributes its TTFT twice, and all of its inter-token gaps twice (ITL resamples requests,
  not gaps: gaps of one request are correlated, and a regression that stalls some requests
  must move whole requests in or out);
- a rate is the drawn requests' total (ok requests, output tokens, good requests) over the
  run's measured window; error rate and attained fraction are ratios of drawn counts. In a
  closed loop the window is not fixed: N slots finish sooner when requests are faster, so the
  window scales with the drawn requests' total time in flight (Little's law: window x mean
  concurrency = total latency). Without that, a run of fixed-length requests would give a rate
  interval of zero width, and any throughput change would read as beyond noise. An open loop
  keeps the fixed window: there the schedule, not the latency, sets the pace.

With all counts 1 each statistic equals the value in summary.json (the tests check that).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen import metric_defs
from loadgen.analysis import sla as sla_mod
from loadgen.analysis.gaps import GapSamples
from loadgen.analysis.metrics import GAP_SAMPLES, Records, as_table, request_frame
from loadgen.analysis.table import RecordTable
from loadgen.metric_defs import PERCENTILES
from loadgen.records import CANCELLED

# What the bootstrap resamples: the registry's metrics with ``gate`` set, and their stats.
STATS: tuple[str, ...] = metric_defs.GATE_STATS
HIGHER_IS_BETTER = frozenset(d.name for d in metric_defs.METRICS if d.higher_is_better)
RATE_METRICS: tuple[str, ...] = tuple(d.name for d in metric_defs.RUN_SCALARS if d.gate and d.resampled)
DISTRIBUTION_METRICS: tuple[str, ...] = tuple(d.name for d in metric_defs.DISTRIBUTIONS if d.gate)


@dataclass(frozen=True)
class RunSamples:
    """Per-request arrays of one run's measured (non-warm-up) requests, index = request."""

    n: int
    window_s: float
    closed_loop: bool  # rates scale with the drawn requests' time in flight (see module doc)
    owners: dict[str, np.ndarray]  # metric -> request index of each sample
    values: dict[str, np.ndarray]  # metric -> sample values (ms)
    per_request: dict[str, np.ndarray]  # ok, failed, good, prompt_tokens, output_tokens, ...

    @classmethod
    def from_run(
        cls, records: Records, summary: Mapping[str, Any], metrics: Collection[str] | None = None
    ) -> RunSamples:
        """The samples of a run's records (a ``RecordTable`` or records) and its summary.
        ``metrics``: the distributions wanted (default all). The inter-token gaps are built
        only when one of them needs them: they are materialised with their owners (16 bytes a
        gap: 400 MB for 100,000 requests x 256 tokens), and a gate without an ITL rule must
        not pay that."""
        table = as_table(records)
        wanted = [d for d in metric_defs.DISTRIBUTIONS if metrics is None or d.name in metrics]
        need_gaps = metrics is None or needs_gaps(metrics)
        if not need_gaps:
            table = table.without_chunks()
        measured = table.select(~table.column("warmup"))
        frame = request_frame(measured)
        ok = frame["ok"].to_numpy(dtype=bool)
        failed = ~ok & (frame["error_class"] != CANCELLED).to_numpy()
        owners, values = {}, {}
        by_kind = _gap_samples(measured, ok) if need_gaps else {}
        for d in wanted:
            if d.samples in by_kind:
                owners[d.name], values[d.name] = by_kind[d.samples]
            else:  # one value per request: ok requests, or all measured ones
                col = frame[d.name].to_numpy(dtype=float)
                keep = ~np.isnan(col) & (ok if d.samples == "ok_requests" else True)
                owners[d.name], values[d.name] = np.flatnonzero(keep), col[keep]
        slos = {k: float(v) for k, v in ((summary.get("sla") or {}).get("slos") or {}).items()}
        good = sla_mod.good_mask(ok, {k: frame[k].to_numpy(dtype=float) for k in slos}, slos)
        out_all = frame["output_tokens"].fillna(0).to_numpy(dtype=np.float64)
        prompt = frame["prompt_tokens"].fillna(0).to_numpy(dtype=np.float64)
        items = frame["items"].fillna(0).to_numpy(dtype=np.float64)
        send = frame["t_send_ns"].to_numpy(dtype=np.float64)
        end = frame["t_end_ns"].astype("Float64").fillna(np.nan).to_numpy(dtype=np.float64)
        busy = np.nan_to_num(end - send, nan=0.0) / 1e9
        per_request = {
            "ok": ok.astype(float),
            "failed": failed.astype(float),
            "good": good.astype(float),
            "ok_output_tokens": out_all * ok,
            "ok_prompt_tokens": prompt * ok,
            "ok_items": items * ok,
            "good_output_tokens": out_all * good,
            "busy_s": busy,
        }
        load = (summary.get("conditions") or {}).get("load") or {}
        return cls(
            len(measured),
            float((summary.get("window") or {}).get("seconds") or 0.0),
            bool(load.get("concurrency")),
            owners,
            values,
            per_request,
        )


def needs_gaps(metrics: Collection[str]) -> bool:
    """Whether any of ``metrics`` is a distribution of inter-token gaps (ITL): only then does
    ``RunSamples.from_run`` need a table's chunk columns."""
    return any(d.name in metrics and d.samples in GAP_SAMPLES for d in metric_defs.DISTRIBUTIONS)


def _gap_samples(measured: RecordTable, ok: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{gap kind: (owning request of each sample, samples in ms)}: a request owns each of its
    gaps (its row in ``measured``)."""
    gaps = GapSamples(measured, ok)
    itl, gap_owner = gaps.to_ms(), gaps.owners()
    if gaps.one_token_each:
        per_token, token_owner = itl, gap_owner
    else:
        n = gaps.tokens()
        per_token, token_owner = np.repeat(itl / n, n), np.repeat(gap_owner, n)
    return dict(zip(GAP_SAMPLES, ((gap_owner, itl), (token_owner, per_token))))


def statistic(run: RunSamples, metric: str, stat: str | None, counts: np.ndarray | None = None) -> float:
    """``metric`` (``stat``) of ``run`` with request ``i`` drawn ``counts[i]`` times (None: once
    each, i.e. the run as measured). NaN when undefined (no samples, zero-length window)."""
    if metric in DISTRIBUTION_METRICS:
        vals = run.values[metric]
        if counts is not None:
            vals = np.repeat(vals, counts[run.owners[metric]])
        if vals.size == 0:
            return float("nan")
        if stat == "mean":
            return float(vals.mean())
        if stat is None:
            raise KeyError(f"{metric} is a distribution: name a stat")
        return float(np.percentile(vals, PERCENTILES[stat], method="linear"))
    w = np.ones(run.n) if counts is None else counts
    pr = run.per_request

    def total(key: str) -> float:
        return float(w @ pr[key])

    window = run.window_s
    if run.closed_loop and counts is not None:
        busy, drawn = float(pr["busy_s"].sum()), total("busy_s")
        window = window * drawn / busy if busy > 0 else window

    def per_s(x: float) -> float:
        return x / window if window > 0 else float("nan")

    def frac(num: float, den: float) -> float:
        return num / den if den else float("nan")

    rates: dict[str, Callable[[], float]] = {
        "request_throughput_rps": lambda: per_s(total("ok")),
        "input_tokens_per_s": lambda: per_s(total("ok_prompt_tokens")),
        "output_tokens_per_s": lambda: per_s(total("ok_output_tokens")),
        "total_tokens_per_s": lambda: per_s(total("ok_prompt_tokens") + total("ok_output_tokens")),
        "items_per_s": lambda: per_s(total("ok_items")),
        "goodput_rps": lambda: per_s(total("good")),
        "goodput_output_tokens_per_s": lambda: per_s(total("good_output_tokens")),
        "goodput_attained_fraction": lambda: frac(total("good"), total("ok") + total("failed")),
        "error_rate": lambda: frac(total("failed"), total("ok") + total("failed")),
    }
    return rates[metric]()


def ratio(candidate: float, baseline: float) -> float:
    """candidate / baseline, with 0/0 = 1 (no change) and x/0 = inf."""
    if baseline == 0:
        return 1.0 if candidate == 0 else float("inf")
    return candidate / baseline


@dataclass(frozen=True)
class Interval:
    estimate: float  # the statistic (or ratio) of the runs as measured
    low: float
    high: float
    resamples_used: int  # resamples where the statistic was defined


def bootstrap(
    candidate: RunSamples,
    baseline: RunSamples | None,
    metric: str,
    stat: str | None,
    *,
    resamples: int,
    confidence: float,
    rng: np.random.Generator,
) -> Interval:
    """Percentile bootstrap interval of the candidate/baseline ratio of the statistic (or, with
    ``baseline=None``, of the candidate's statistic itself). Each resample redraws the requests
    of each run independently, with replacement, keeping each run's request count."""

    def point(run: RunSamples) -> float:
        return statistic(run, metric, stat)

    def draw(run: RunSamples) -> float:
        counts = np.bincount(rng.integers(0, run.n, run.n), minlength=run.n) if run.n else np.zeros(0, int)
        return statistic(run, metric, stat, counts)

    if baseline is None:
        estimate = point(candidate)
        samples = np.array([draw(candidate) for _ in range(resamples)])
    else:
        estimate = ratio(point(candidate), point(baseline))
        samples = np.array([ratio(draw(candidate), draw(baseline)) for _ in range(resamples)])
    samples = samples[~np.isnan(samples)]
    if samples.size == 0 or np.isnan(estimate):
        return Interval(estimate, float("nan"), float("nan"), int(samples.size))
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail], method="linear")
    return Interval(float(estimate), float(low), float(high), int(samples.size))
