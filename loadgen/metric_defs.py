"""The metric registry: every metric loadgen reports, defined once, in one table.

Why: the metric names used to be listed again in each module that names them (the profile's
SLA rules, the SLA evaluation, the summary, the bootstrap, the gate's rules, compare's table,
the report and the console), and the copies drifted: a profile rejected run-level rules that
the evaluation understood. Now each of those takes its list from ``METRICS``, so a metric added
here is accepted by SLA and gate rules, evaluated, compared and shown everywhere its flags say,
and ``tests/test_metric_registry.py`` fails until the summary actually computes it.

Adding a metric: one ``MetricDef`` below. A distribution whose ``samples`` is a per-request
column (``ok_requests`` / ``measured_requests``) also needs that column in
``analysis.metrics.request_frame`` (and ``DERIVED_COLUMNS``); a run scalar needs its number
written at ``path`` by ``analysis.metrics.summarize`` and, when ``gate`` is set, a resampled
form in ``analysis.bootstrap.statistic``.

A leaf module: it imports nothing of loadgen, so every layer may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["distribution", "run"]
# What a distribution summarizes (measured = not warm-up): one value per ok measured request, or
# per measured request (ok or not), both the request_frame column of the metric's name; or the
# gaps between consecutive content chunks of ok requests, per chunk or shared among the tokens
# the later chunk carried (``analysis.metrics.itl_values``).
Samples = Literal["ok_requests", "measured_requests", "chunk_gaps", "token_gaps"]

PERCENTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99_9": 99.9}
# The keys of every distribution in summary.json, in their order there.
STATS: tuple[str, ...] = ("count", "mean", "std", "min", *PERCENTILES, "max")
# The stats an SLA rule may name with a distribution metric (and the SLA evaluation reads).
RULE_STATS: tuple[str, ...] = (*PERCENTILES, "mean", "max", "min")
# The stats a gate rule may name: those the bootstrap recomputes on resamples.
GATE_STATS: tuple[str, ...] = (*PERCENTILES, "mean")
# Columns of the report's latency table and the stat rows of compare's table, in order.
TABLE_STATS: tuple[str, ...] = (*PERCENTILES, "mean")
# Columns of the console's end-of-run latency table, in order.
CONSOLE_STATS: tuple[str, ...] = ("mean", *PERCENTILES, "max")


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric: where it is in summary.json, how it is named and shown, and who uses it."""

    name: str  # its key in summary.json and the name rules use: "ttft_ms"
    kind: Kind  # "distribution": a dict of STATS; "run": one number per run
    path: tuple[str, ...]  # where it sits in summary.json
    unit: str  # "ms", "req/s", "tok/s", "requests" or "fraction" (shown as a percentage)
    label: str  # short name in tables: "TTFT", "output tokens/s"
    description: str
    higher_is_better: bool = False  # direction of "worse" for the gate's max_regression
    digits: int = 1  # decimals on the console (of the percentage, for a fraction)
    samples: Samples | None = None  # distributions only: what it summarizes
    title: str = ""  # longer name for plot titles and axes; the label when empty
    gate: bool = True  # the bootstrap resamples it, so a gate rule may bound it
    compare: bool = True  # rows in compare's table (distributions: TABLE_STATS rows, a CDF plot)
    console: bool = False  # distributions: a row of the console's latency table
    report: str | None = None  # the report table it is a row of: "latency", "throughput", "goodput"
    # A distribution that equals this other one when every request went out on time (a closed
    # loop, a client that kept up): the console's and the report's tables show it only when it
    # differs (``table_shows``), so a run without send lag does not show the same figures twice.
    same_as: str | None = None

    @property
    def plot_title(self) -> str:
        return self.title or self.label


def _dist(name: str, label: str, samples: Samples, description: str, **kw: Any) -> MetricDef:
    return MetricDef(name, "distribution", ("metrics", name), "ms", label, description, samples=samples, **kw)


def _run(name: str, path: tuple[str, ...], unit: str, label: str, description: str, **kw: Any) -> MetricDef:
    return MetricDef(name, "run", path, unit, label, description, **kw)


# Distributions first, in summary.json's order; then run scalars, in compare's row order.
METRICS: tuple[MetricDef, ...] = (
    _dist(
        "ttft_ms",
        "TTFT",
        "ok_requests",
        "time to first token: first token-bearing chunk minus send",
        console=True,
        report="latency",
    ),
    _dist(
        "ttfb_ms",
        "TTFB",
        "ok_requests",
        "time to first byte of the response body minus send",
        console=True,
        report="latency",
        compare=False,
    ),
    _dist(
        "itl_ms",
        "ITL (per chunk)",
        "chunk_gaps",
        "inter-token latency: gaps between consecutive token-bearing chunks",
        digits=2,
        console=True,
        report="latency",
    ),
    _dist(
        "itl_per_token_ms",
        "ITL (per token)",
        "token_gaps",
        "each chunk gap divided among the tokens its later chunk carried",
        digits=2,
        console=True,
        report="latency",
        compare=False,
    ),
    _dist(
        "tpot_ms",
        "TPOT",
        "ok_requests",
        "time per output token: (last chunk - first chunk) / (output tokens - 1)",
        digits=2,
        console=True,
        report="latency",
    ),
    _dist(
        "e2e_ms",
        "E2E",
        "ok_requests",
        "end of stream minus send",
        title="E2E latency",
        console=True,
        report="latency",
    ),
    _dist(
        "client_lag_ms",
        "client lag",
        "measured_requests",
        "send minus scheduled send: how late the client sent",
        digits=2,
        console=True,
        compare=False,
    ),
    # Measured from the intended send time (wrk2's correction of coordinated omission): the time
    # a request waited to be sent (client_lag_ms) counts, as it does for the user who asked then.
    _dist(
        "ttft_from_sched_ms",
        "TTFT from schedule",
        "ok_requests",
        "time to first token from the scheduled send: first token-bearing chunk minus t_sched",
        title="TTFT from the scheduled send",
        console=True,
        report="latency",
        compare=False,
        same_as="ttft_ms",
    ),
    _dist(
        "e2e_from_sched_ms",
        "E2E from schedule",
        "ok_requests",
        "end of stream minus scheduled send",
        title="E2E latency from the scheduled send",
        console=True,
        report="latency",
        compare=False,
        same_as="e2e_ms",
    ),
    _run(
        "request_throughput_rps",
        ("metrics", "request_throughput_rps"),
        "req/s",
        "requests/s",
        "ok requests per second of the measured window",
        higher_is_better=True,
        digits=2,
        report="throughput",
    ),
    _run(
        "input_tokens_per_s",
        ("metrics", "input_tokens_per_s"),
        "tok/s",
        "input tokens/s",
        "prompt tokens of ok requests per second",
        higher_is_better=True,
        digits=0,
        report="throughput",
    ),
    _run(
        "output_tokens_per_s",
        ("metrics", "output_tokens_per_s"),
        "tok/s",
        "output tokens/s",
        "output tokens of ok requests per second",
        higher_is_better=True,
        digits=0,
        report="throughput",
    ),
    _run(
        "total_tokens_per_s",
        ("metrics", "total_tokens_per_s"),
        "tok/s",
        "total tokens/s",
        "input plus output tokens of ok requests per second",
        higher_is_better=True,
        digits=0,
        report="throughput",
    ),
    _run(
        "goodput_rps",
        ("metrics", "goodput", "requests_per_s"),
        "req/s",
        "good requests/s",
        "ok requests that met every per-request SLO, per second",
        higher_is_better=True,
        digits=2,
        report="goodput",
    ),
    _run(
        "goodput_output_tokens_per_s",
        ("metrics", "goodput", "output_tokens_per_s"),
        "tok/s",
        "good output tokens/s",
        "output tokens of good requests per second",
        higher_is_better=True,
        digits=0,
        report="goodput",
    ),
    _run(
        "goodput_attained_fraction",
        ("metrics", "goodput", "attained_fraction"),
        "fraction",
        "requests that met every SLO",
        "good requests / (ok + failed)",
        higher_is_better=True,
        digits=1,
        report="goodput",
    ),
    _run(
        "error_rate",
        ("counts", "error_rate"),
        "fraction",
        "error rate",
        "failed / (ok + failed); cancelled requests are neither",
        digits=2,
    ),
    _run(
        "mean_concurrency",
        ("metrics", "mean_concurrency"),
        "requests",
        "mean requests in flight",
        "time-averaged requests in flight over the measured window",
        digits=2,
        gate=False,
        report="throughput",
    ),
)

BY_NAME: dict[str, MetricDef] = {d.name: d for d in METRICS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DISTRIBUTIONS: tuple[MetricDef, ...] = tuple(d for d in METRICS if d.kind == "distribution")
RUN_SCALARS: tuple[MetricDef, ...] = tuple(d for d in METRICS if d.kind == "run")
GATED: tuple[MetricDef, ...] = tuple(d for d in METRICS if d.gate)


def get(name: str) -> MetricDef:
    """The definition of ``name``; ``KeyError`` naming the valid metrics when there is none."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; valid: {', '.join(NAMES)}") from None


# Two distributions match when no stat of TABLE_STATS differs by more than both 1 % and 0.1 ms
# (the console's resolution).
SAME_WITHIN_FRACTION, SAME_WITHIN_MS = 0.01, 0.1


def table_shows(summary: Mapping[str, Any], d: MetricDef) -> bool:
    """Whether the console's and the report's tables show ``d`` (where its flags put it) for
    ``summary``: always, unless it has a ``same_as``; then only when it is in the summary (an
    older one lacks it) and does not match that one (see ``SAME_WITHIN_FRACTION``). Equality is
    not exact even in a closed loop: a slot stamps ``t_sched`` and the request's send a fraction
    of a millisecond apart (building and encoding the request), which moves no stat visibly; a
    client that sent late moves the stats by its lateness."""
    if d.same_as is None:
        return True
    mine, theirs = lookup(summary, d.name), lookup(summary, d.same_as) or {}
    if not isinstance(mine, dict):
        return False
    for stat in TABLE_STATS:
        a, b = mine.get(stat), theirs.get(stat)
        if a is None or b is None:
            if a is not b:
                return True
        elif abs(a - b) > max(SAME_WITHIN_FRACTION * abs(b), SAME_WITHIN_MS):
            return True
    return False


def lookup(summary: Mapping[str, Any], name: str, stat: str | None = None) -> Any:
    """The value of ``name`` in ``summary`` (a summary.json dict): a run scalar's number, a
    distribution's dict, or with ``stat`` one of its stats; ``None`` wherever it is absent."""
    node: Any = summary
    for key in get(name).path + ((stat,) if stat is not None else ()):
        node = node.get(key) if isinstance(node, dict) else None
    return node
