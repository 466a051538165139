"""The metric registry: every metric loadgen reports, defined once, in one table.

Why one table: every module that lists metrics (SLA rules and SLOs, the evaluation, the
summary, the bootstrap, the gate, compare, the report, the curve, the console) takes its list
from ``METRICS`` and each per-request latency its ``formula``, so a metric added here is
computed, accepted, compared and shown everywhere its flags say (the history: docs/metrics.md,
"One entry per metric"); ``tests/test_metric_registry.py`` fails until the summary computes it.

Adding a metric: one ``MetricDef`` in ``catalogue.METRICS``. A per-request distribution (its
``samples`` ``ok_requests`` / ``measured_requests``) carries its ``formula`` (a ``Span`` between
two record timestamps), and every consumer follows; a run scalar needs its number written at
``path`` by ``analysis.metrics.summarize`` and, when ``gate`` is set, a resampled form in
``analysis.bootstrap.statistic``; a distribution of chunk gaps, its samples in
``analysis.metrics``.

A leaf package: it imports numpy and nothing of loadgen, so every layer may import it.
``model`` says what a metric is, ``catalogue`` lists them.
"""

from loadgen.metric_defs.catalogue import (
    BY_NAME,
    CURVE,
    CURVE_PLOTS,
    DEFINITIONS_CHANGED,
    DISTRIBUTIONS,
    FIDELITY_FIELDS,
    FIDELITY_PREFIX,
    GATED,
    METRICS,
    NAMES,
    PER_REQUEST,
    RUN_SCALARS,
    SAME_WITHIN_FRACTION,
    SAME_WITHIN_MS,
    SERVER_COMPARED,
    SLOS,
    applicable,
    get,
    lookup,
    present,
    table_shows,
)
from loadgen.metric_defs.model import (
    CONSOLE_STATS,
    GATE_STATS,
    PER_REQUEST_SAMPLES,
    PERCENTILES,
    RULE_STATS,
    STATS,
    TABLE_STATS,
    Applies,
    Columns,
    Kind,
    MetricDef,
    Samples,
    Span,
    tpot_ms,
)

__all__ = [
    "BY_NAME",
    "CONSOLE_STATS",
    "CURVE",
    "CURVE_PLOTS",
    "DEFINITIONS_CHANGED",
    "DISTRIBUTIONS",
    "FIDELITY_FIELDS",
    "FIDELITY_PREFIX",
    "GATED",
    "GATE_STATS",
    "METRICS",
    "NAMES",
    "PERCENTILES",
    "PER_REQUEST",
    "PER_REQUEST_SAMPLES",
    "RULE_STATS",
    "RUN_SCALARS",
    "SAME_WITHIN_FRACTION",
    "SAME_WITHIN_MS",
    "SERVER_COMPARED",
    "SLOS",
    "STATS",
    "TABLE_STATS",
    "Applies",
    "Columns",
    "Kind",
    "MetricDef",
    "Samples",
    "Span",
    "applicable",
    "get",
    "lookup",
    "present",
    "table_shows",
    "tpot_ms",
]
