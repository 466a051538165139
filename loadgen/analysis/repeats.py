"""Between-repeat statistics: a run's headline figures over its repeats, and the gate's test.

A run of ``--repeats N`` sends the same load N times: same profile and seed, so the same
schedule, the same prompts and lengths; fresh connections, and a fresh simulator when it served.
The repeats then differ only by what the server (and the machine) did differently, and each
repeat's figure (its p99 TTFT, its output tokens/s) is one draw of that run-to-run noise.

Why Student's t over the repeats and not the per-request bootstrap: the bootstrap resamples one
run's requests, so it sees the noise *within* a run (which requests happened to be slow) and
not the noise *between* runs (a server that was warmer, a neighbour on the GPU, a batch that
formed differently from the first second on). Requests of one run share that state and are not
independent of it; repeats are the independent units. The interval of a figure is
mean ± t(1 - (1 - c) / 2, N - 1) · sd / sqrt(N) over the N repeat values (sd with N - 1); with
few repeats t is large (4.30 at N = 3) and the interval honest about it. The gate compares two
repeated runs with Welch's t on the ratio of their repeat means (``welch_ratio``), so one noisy
run is one value among N, not a verdict.

The t quantile is computed here (``t_quantile``: the regularised incomplete beta by Lentz's
continued fraction, then bisection), so the runtime needs no scipy; the tests check it
against scipy's.

The blocks a pooled summary cannot recompute from the pooled records are pooled here from the
repeats' own: ``pool_fidelity`` (each repeat was matched against its own simulator's log, whose
response ids the others reuse), ``pool_server`` (each repeat's counters are deltas over its own
scrapes), ``pool_saturation`` and ``pool_steady`` (trends in time, which mean nothing across the
gaps between repeats). Each one's rule is in its docstring and in docs/guides/load-shapes.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from loadgen import metric_defs
from loadgen.analysis.client_means import client_vs_server
from loadgen.summary import Distribution, Fidelity, ServerView
from loadgen.summary.stages import SteadyState

# The headline figures given with a between-repeat interval: (metric, stat), stat None for a run
# scalar. The report's headline, the console and compare show them (those the run has: an
# embeddings run has no TTFT, a chat run no items/s); every name is the registry's, so a renamed
# metric fails here at import.
HEADLINE: tuple[tuple[str, str | None], ...] = (
    ("ttft_ms", "p50"),
    ("ttft_ms", "p99"),
    ("tpot_ms", "p50"),
    ("tpot_ms", "p99"),
    ("itl_ms", "p50"),
    ("itl_ms", "p99"),
    ("e2e_ms", "p50"),
    ("e2e_ms", "p99"),
    ("request_throughput_rps", None),
    ("output_tokens_per_s", None),
    ("items_per_s", None),
    ("goodput_rps", None),
    ("error_rate", None),
)
for _metric, _stat in HEADLINE:
    metric_defs.get(_metric)  # KeyError naming the valid metrics on a stale name
CONFIDENCE = 0.95
# Below this many values an interval is shown as TOO_FEW, not as numbers: with 2 repeats the t
# quantile is 12.7 and the "interval" of a capacity ran from -7.0 to 18.5 req/s, which bounds
# nothing a reader can act on (the figure is still computed: the gate's t tests use it).
MIN_REPEATS_TO_BOUND = 3
TOO_FEW = "too few repeats to bound"


def bounded(fig: Mapping[str, Any]) -> bool:
    """Whether a figure over repeats (``n``, ``low``, ``high``) has an interval worth showing."""
    return (
        (fig.get("n") or 0) >= MIN_REPEATS_TO_BOUND
        and fig.get("low") is not None
        and fig.get("high") is not None
    )


def figure_name(metric: str, stat: str | None) -> str:
    """A figure as a gate rule writes it: ``"p99 ttft_ms"``, or ``"output_tokens_per_s"``."""
    return f"{stat} {metric}" if stat else metric


@dataclass(frozen=True, slots=True)
class TInterval:
    """Mean of the values, their sample sd, and the t interval of the mean (None below 2)."""

    n: int
    mean: float | None
    sd: float | None
    low: float | None
    high: float | None


def t_interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> TInterval:
    """Student's t interval of the mean of ``values`` (the Nones, a repeat without the figure,
    left out); the mean alone for one value, nothing for none."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(xs)
    if n == 0:
        return TInterval(0, None, None, None, None)
    mean = sum(xs) / n
    if n == 1:
        return TInterval(1, mean, None, None, None)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(1 - (1 - confidence) / 2, n - 1) * sd / math.sqrt(n)
    # Every figure loadgen puts over repeats (rates, latencies, costs, energy) is non-negative.
    return TInterval(n, mean, sd, max(0.0, mean - half), mean + half)


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """candidate mean / baseline mean, its interval, and the degrees of freedom used."""

    estimate: float
    low: float
    high: float
    df: float


def welch_ratio(
    candidate: Sequence[float], baseline: Sequence[float] | float, confidence: float = CONFIDENCE
) -> RatioInterval | None:
    """The ratio of the candidate's repeat mean to the baseline's, with Welch's t interval by
    the delta method: se(r) = sqrt(s_c²/n_c + r²·s_b²/n_b) / m_b, degrees of freedom by
    Welch-Satterthwaite over the two terms. A baseline given as one number (a run without
    repeats) is taken as exact: only the candidate's spread counts. None when the candidate has
    fewer than 2 values or the baseline's mean is not positive."""
    c = t_interval(list(candidate))
    b = None if isinstance(baseline, (int, float)) else t_interval(list(baseline))
    mb = float(baseline) if isinstance(baseline, (int, float)) else (b.mean if b else None)
    if c.n < 2 or c.mean is None or c.sd is None or mb is None or mb <= 0:
        return None
    r = c.mean / mb
    a = c.sd**2 / c.n
    bb = 0.0 if b is None or b.sd is None else r**2 * b.sd**2 / b.n
    if a + bb == 0:
        return RatioInterval(r, r, r, float("inf"))
    df_den = a**2 / (c.n - 1) + (bb**2 / (b.n - 1) if b is not None and b.n > 1 else 0.0)
    df = (a + bb) ** 2 / df_den if df_den > 0 else float("inf")
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(a + bb) / mb
    return RatioInterval(r, r - half, r + half, df)


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (0.5 < p < 1; df may be
    fractional, as Welch's is; infinite df is the normal's), by bisection on ``t_cdf``."""
    if math.isinf(df):
        df = 1e9
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t: 1 - I_x(df/2, 1/2) / 2 with x = df / (df + t²), for t >= 0."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2, 0.5, x)
    return 1 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta I_x(a, b), by its continued fraction (Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1.0 - _betainc(b, a, 1 - x)
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = tiny if abs(d) < tiny else d
        d = 1.0 / d
        c = 1.0 + num / c
        c = tiny if abs(c) < tiny else c
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return math.exp(ln_front) * (f - 1.0) / a


# A stage's saturation verdicts from best to worst: the pooled stage has its worst repeat's (one
# over-saturated repeat is a queue that grew at that load).
SATURATION_ORDER = ("stable", "undetermined", "over_saturated")
PERCENTILES = ("p50", "p90", "p95", "p99", "p99_9")
Named = Sequence[tuple[str, Mapping[str, Any]]]  # (a repeat's folder, its block), in the order run


def pool_distribution(dists: Sequence[Mapping[str, Any]]) -> Distribution:
    """The repeats' distributions of one sample as one: count, mean, std (ddof 0), min and max
    exact (from each one's count, mean and std); each percentile the largest of the repeats',
    an upper bound of the pooled sample's (a quantile of a mixture lies between its parts')."""
    have = [d for d in dists if d.get("count")]
    n = sum(int(d["count"]) for d in have)
    out: dict[str, Any] = dict.fromkeys(("count", "mean", "std", "min", *PERCENTILES, "max"))
    out["count"] = n
    if n:
        mean = sum(d["count"] * d["mean"] for d in have) / n
        second = sum(d["count"] * ((d["std"] or 0.0) ** 2 + d["mean"] ** 2) for d in have) / n
        out.update(mean=mean, std=math.sqrt(max(0.0, second - mean**2)))
        out.update(min=min(d["min"] for d in have), max=max(d["max"] for d in have))
        out.update({stat: max(d[stat] for d in have) for stat in PERCENTILES})
    return cast(Distribution, out)


def pool_fidelity(blocks: Sequence[tuple[str, Mapping[str, Any] | None]]) -> Fidelity:
    """The simulator's ground truth over the repeats: counts summed, each lag and error
    distribution pooled (``pool_distribution``: its percentiles the worst repeat's, the bound the
    verdict judges), and the verdict failing when any repeat's did, with that repeat's reasons;
    a repeat without the block (None: no ground truth was left to match) fails it too."""
    each = [b for _p, b in blocks if b is not None]
    out: dict[str, Any] = {"source": f"{each[0]['source']}; {len(each)} repeats, each against its own log"}
    for key in ("requests_matched", "requests_unmatched", "chunks_matched"):
        out[key] = sum(int(b[key]) for b in each)
    for field in metric_defs.FIDELITY_FIELDS:
        out[field] = pool_distribution([b[field] for b in each])
    out["thresholds"] = dict(each[0]["thresholds"])
    reasons = [
        f"{path}: {why}"
        for path, b in blocks
        for why in (b["reasons"] if b is not None else ["no ground truth to match its requests against"])
    ]
    failed = any(b is None or b["verdict"] == "fail" for _p, b in blocks)
    out["verdict"] = "fail" if failed else ("pass" if out["requests_matched"] else "no_data")
    out["reasons"] = reasons
    return cast(Fidelity, out)


def pool_server(blocks: Named, client: Mapping[str, float | None]) -> ServerView:
    """The server's view over the repeats, when every repeat has one: what is common (engine,
    format, path, interval) as the first repeat's; scrapes and counter deltas (tokens,
    preemptions, histograms, prefix cache, engine time) summed, each repeat's delta being over
    its own scrapes, and the ratios of those sums (a histogram's mean, the hit rate, ms per
    token); gauges over all their samples (mean weighted by samples, max the largest); the
    client's means (``client``: over the pooled records) beside the pooled histograms'. When a
    repeat has none: unavailable, the note naming each repeat without it."""
    each = [b for _p, b in blocks]
    first = each[0]
    common = {k: first.get(k) for k in ("engine", "format", "path", "interval_s")}
    missing = "; ".join(f"{p}: {b.get('note') or 'nothing scraped'}" for p, b in blocks if not b["available"])
    if missing:
        return cast(ServerView, {"available": False, "note": f"no server view in {missing}", **common})
    out: dict[str, Any] = {"available": True, "note": first.get("note"), **common}
    out["scrapes"], out["failed_scrapes"] = _total(each, "scrapes"), _total(each, "failed_scrapes")
    rtts = [(b["scrapes"], b["scrape_rtt_ms"]) for b in each if b.get("scrape_rtt_ms")]
    if weight := sum(n for n, _r in rtts):
        mean = sum(n * r["mean"] for n, r in rtts) / weight
        out["scrape_rtt_ms"] = {"mean": mean, "max": max(r["max"] for _n, r in rtts)}
    out["includes_warmup"] = any(b.get("includes_warmup") for b in each)
    out["gauges"] = {g: _pool_gauge([_at(b, "gauges", g) for b in each]) for g in first.get("gauges") or {}}
    out["preemptions"] = _total(each, "preemptions")
    out["tokens"] = {k: _total(each, "tokens", k) for k in first.get("tokens") or {}}
    out["histograms"] = {}
    for h in first.get("histograms") or {}:
        count, seconds = _total(each, "histograms", h, "count"), _total(each, "histograms", h, "sum_s")
        if count is not None and seconds is not None:
            mean_ms = seconds / count * 1e3 if count > 0 else None
            out["histograms"][h] = {"count": count, "sum_s": seconds, "mean_ms": mean_ms}
    out["client_vs_server"] = client_vs_server(out["histograms"], client)
    queries, hits = _total(each, "prefix_cache", "queries"), _total(each, "prefix_cache", "hits")
    if queries is not None and hits is not None:
        out["prefix_cache"] = {
            "queries": queries,
            "hits": hits,
            "hit_rate": hits / queries if queries else None,
        }
    if "engine_time" in first:
        busy = {k: _total(each, "engine_time", k) for k in ("prompt_s", "generation_s", "decode_calls")}
        for kind in ("prompt", "generation"):
            secs, tokens = busy[f"{kind}_s"], out["tokens"].get(kind)
            busy[f"{kind}_ms_per_token"] = secs / tokens * 1e3 if secs is not None and tokens else None
        out["engine_time"] = busy
    return cast(ServerView, out)


def pool_saturation(blocks: Named) -> dict[str, Any]:
    """A stage's over-saturation verdict over the repeats: the worst repeat's block (its trends
    fitted within that repeat), its reason naming every repeat with that verdict."""
    worst = max(SATURATION_ORDER.index(b["verdict"]) for _p, b in blocks)
    named = [(p, b) for p, b in blocks if SATURATION_ORDER.index(b["verdict"]) == worst]
    return {**named[0][1], "reason": "; ".join(f"{p}: {b['reason']}" for p, b in named)}


def pool_steady(blocks: Named) -> SteadyState:
    """A stage's steady state over the repeats: steady when every repeat's was, each change the
    largest in size among the repeats', the reason naming each repeat that was not steady."""
    out = dict(blocks[0][1])
    for key in ("throughput_change", "in_flight_change"):
        values = [b[key] for _p, b in blocks if b.get(key) is not None]
        out[key] = max(values, key=abs) if values else None
    unsteady = [f"{p}: {b.get('reason')}" for p, b in blocks if not b.get("steady")]
    out.update(steady=not unsteady, reason="; ".join(unsteady) or None)
    return cast(SteadyState, out)


def _pool_gauge(parts: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    have = [p for p in parts if p and p.get("samples")]
    n = sum(int(p["samples"]) for p in have)
    if not n:
        return None
    return {
        "mean": sum(p["samples"] * p["mean"] for p in have) / n,
        "max": max(p["max"] for p in have),
        "samples": n,
    }


def _at(block: Mapping[str, Any], *path: str) -> Any:
    node: Any = block
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _total(blocks: Sequence[Mapping[str, Any]], *path: str) -> Any:
    """The sum of the repeats' values at ``path``; None when any repeat has none (a counter
    missing, or gone down, in one repeat leaves the pooled delta unknown)."""
    values = [_at(b, *path) for b in blocks]
    return None if any(v is None for v in values) else sum(values)
