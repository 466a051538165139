"""The metric registry's table: every metric loadgen reports, one ``MetricDef`` each, and the
lists every consumer derives from it (see the package's docstring).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.metric_defs.model import PER_REQUEST_SAMPLES, TABLE_STATS, MetricDef, Samples, Span


def _dist(name: str, label: str, samples: Samples, description: str, **kw: Any) -> MetricDef:
    return MetricDef(name, "distribution", ("metrics", name), "ms", label, description, samples=samples, **kw)


def _run(name: str, path: tuple[str, ...], unit: str, label: str, description: str, **kw: Any) -> MetricDef:
    return MetricDef(name, "run", path, unit, label, description, **kw)


# The loadgen version whose CHANGELOG.md entry last changed what a metric means or how it is
# computed (not a new metric beside the others): a summary names it, so two runs' figures can be
# told comparable. Change it, and add the entry under "Metric definitions", with any such change.
DEFINITIONS_CHANGED = "0.1.0"

# Where the GPU energy figures sit (``server.telemetry``), in a run's and in each stage's summary.
ENERGY: tuple[str, ...] = ("telemetry", "energy")

# Distributions first, in summary.json's order; then run scalars, in compare's row order.
METRICS: tuple[MetricDef, ...] = (
    _dist(
        "ttft_ms",
        "TTFT",
        "ok_requests",
        "time to first token: first token-bearing chunk minus send",
        formula=Span("t_send_ns", "t_first_token_ns"),
        console=True,
        report="latency",
        slo=True,
        curve=True,
        curve_plot=True,
        server_histogram="ttft",
        applies="streamed",
    ),
    _dist(
        "ttfb_ms",
        "TTFB",
        "ok_requests",
        "time to first byte of the response body minus send",
        formula=Span("t_send_ns", "t_first_byte_ns"),
        console=True,
        report="latency",
        compare=False,
        applies="streamed",
    ),
    _dist(
        "itl_ms",
        "ITL (per chunk)",
        "chunk_gaps",
        "inter-token latency: gaps between consecutive token-bearing chunks",
        digits=2,
        console=True,
        report="latency",
        curve=True,
        server_histogram="itl",
        applies="streamed",
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
        server_histogram="itl",
        applies="streamed",
    ),
    _dist(
        "tpot_ms",
        "TPOT",
        "ok_requests",
        "time per output token: (last chunk - first chunk) / (output tokens - 1)",
        formula=Span("t_first_token_ns", "t_last_chunk_ns", per_token=True),
        digits=2,
        console=True,
        report="latency",
        slo=True,
        curve=True,
        curve_plot=True,
        server_histogram="tpot",
        applies="streamed",
    ),
    _dist(
        "e2e_ms",
        "E2E",
        "ok_requests",
        "end of stream minus send",
        formula=Span("t_send_ns", "t_end_ns", ok_only=True),
        title="E2E latency",
        console=True,
        report="latency",
        slo=True,
        curve=True,
        curve_plot=True,
        server_histogram="e2e",
    ),
    _dist(
        "client_lag_ms",
        "client lag",
        "measured_requests",
        "send minus scheduled send: how late the client sent",
        formula=Span("t_sched_ns", "t_send_ns"),
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
        formula=Span("t_sched_ns", "t_first_token_ns"),
        title="TTFT from the scheduled send",
        console=True,
        report="latency",
        compare=False,
        same_as="ttft_ms",
        applies="streamed",
    ),
    _dist(
        "e2e_from_sched_ms",
        "E2E from schedule",
        "ok_requests",
        "end of stream minus scheduled send",
        formula=Span("t_sched_ns", "t_end_ns", ok_only=True),
        title="E2E latency from the scheduled send",
        console=True,
        report="latency",
        compare=False,
        same_as="e2e_ms",
    ),
    # An agent's load (workload.tools): how long until the model started calling a tool, the
    # latency a tool-using agent waits on before it can run the tool. Only where some request
    # made a tool call; not resampled, so the gate does not bound it.
    _dist(
        "ttft_tool_ms",
        "TTFT (tool call)",
        "ok_requests",
        "time to the first tool-call token: first tool_calls piece (name or arguments) minus send",
        formula=Span("t_send_ns", "t_first_tool_ns"),
        title="time to the first tool-call token",
        console=True,
        report="latency",
        compare=False,
        gate=False,
        when_present=True,
        applies="streamed",
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
        applies="streamed",
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
        applies="streamed",
    ),
    _run(
        "items_per_s",
        ("metrics", "items_per_s"),
        "items/s",
        "items/s",
        "items (embedded inputs, reranked documents) of ok requests per second",
        higher_is_better=True,
        digits=1,
        report="throughput",
        applies="pooling",
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
        applies="streamed",
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
    # GPU energy over the measured window (the summary's telemetry block, when GPUs were read):
    # one counter difference per run, so the gate judges the summary's value, not resamples.
    _run(
        "energy_per_output_token_j",
        ENERGY + ("j_per_output_token",),
        "J/token",
        "joules per output token",
        "GPU energy over the measured window (energy counters' difference, every GPU) per output token",
        digits=3,
        report="energy",
        resampled=False,
        when_present=True,
        applies="streamed",
    ),
    _run(
        "energy_per_token_j",
        ENERGY + ("j_per_total_token",),
        "J/token",
        "joules per token",
        "GPU energy over the measured window per input-plus-output token",
        digits=3,
        report="energy",
        resampled=False,
        when_present=True,
    ),
    _run(
        "output_tokens_per_joule",
        ENERGY + ("output_tokens_per_j",),
        "token/J",
        "output tokens per joule",
        "output tokens of ok requests per joule of GPU energy",
        higher_is_better=True,
        digits=2,
        report="energy",
        resampled=False,
        when_present=True,
        applies="streamed",
    ),
    _run(
        "gpu_power_w",
        ENERGY + ("mean_watts",),
        "W",
        "mean GPU power",
        "GPU energy over the measured window / its length, every GPU added (the draw at the throughput)",
        digits=0,
        report="energy",
        resampled=False,
        when_present=True,
    ),
)

# The distributions of the fidelity block (``analysis.fidelity``: a run the built-in simulator
# served), in order, and how compare's rows and the gate's rules name one:
# "fidelity.chunk_lag_ms". Not in METRICS: a run against a real server has no such block.
FIDELITY_FIELDS: tuple[str, ...] = (
    "first_token_lag_ms",
    "chunk_lag_ms",
    "ttft_error_ms",
    "tpot_error_ms",
    "e2e_error_ms",
)
FIDELITY_PREFIX = "fidelity."

BY_NAME: dict[str, MetricDef] = {d.name: d for d in METRICS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DISTRIBUTIONS: tuple[MetricDef, ...] = tuple(d for d in METRICS if d.kind == "distribution")
RUN_SCALARS: tuple[MetricDef, ...] = tuple(d for d in METRICS if d.kind == "run")
GATED: tuple[MetricDef, ...] = tuple(d for d in METRICS if d.gate)
# One value per request (a column of ``analysis.metrics.request_frame``), in the registry's order.
PER_REQUEST: tuple[MetricDef, ...] = tuple(d for d in DISTRIBUTIONS if d.samples in PER_REQUEST_SAMPLES)
# The profile's per-request SLOs (sla.ttft_ms, ...): what goodput counts against.
SLOS: tuple[str, ...] = tuple(d.name for d in PER_REQUEST if d.slo)
# The columns of a multi-stage run's curve points: those the report plots, then the others.
CURVE_PLOTS: tuple[MetricDef, ...] = tuple(d for d in DISTRIBUTIONS if d.curve and d.curve_plot)
CURVE: tuple[MetricDef, ...] = (*CURVE_PLOTS, *(d for d in DISTRIBUTIONS if d.curve and not d.curve_plot))
# The client's means set beside the server's latency histograms of the same quantity.
SERVER_COMPARED: tuple[MetricDef, ...] = tuple(d for d in DISTRIBUTIONS if d.server_histogram)


def applicable(streamed: bool) -> tuple[MetricDef, ...]:
    """The metrics a run of a streamed (or, False, a pooling) protocol has, in registry order."""
    return tuple(d for d in METRICS if d.applies_to(streamed))


def present(summary: Mapping[str, Any], name: str) -> bool:
    """Whether ``summary`` has ``name`` at all (a run scalar may be present and null): a
    metric that does not apply to the run's protocol is absent, and no table shows it."""
    node: Any = summary
    for key in get(name).path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


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
    ``summary``: whenever it is in the summary (a metric that does not apply to the run's
    protocol is not: no empty TTFT rows for an embeddings run); a ``when_present`` one where the
    summary has samples of it; else always, unless it has a ``same_as``; then only when it does
    not match that one (see ``SAME_WITHIN_FRACTION``). Equality is
    not exact even in a closed loop: a slot stamps ``t_sched`` and the request's send a fraction
    of a millisecond apart (building and encoding the request), which moves no stat visibly; a
    client that sent late moves the stats by its lateness."""
    if not present(summary, d.name):
        return False
    if d.when_present:
        return isinstance(lookup(summary, d.name), dict)
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
