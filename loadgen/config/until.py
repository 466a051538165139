"""``--until``: keep a stage going until a statistic is known to a stated precision.

One string, ``'stat metric ±pct%'`` (``'p99 ttft_ms ±5%'``; ``+-`` or ``+/-`` for ``±``): the
stage ends once the 95 % confidence interval of that statistic of its measured requests is
within ``pct`` percent of the estimate on either side, beside its count and duration (the first
limit met ends it; a duration is the time limit of a stage that never gets there). The metric is
a per-request distribution of the registry (the interval is the one ``analysis/precision.py``
computes); the stat a percentile or the mean.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from loadgen import metric_defs
from loadgen.config.sla import stat_key

STATS: tuple[str, ...] = (*metric_defs.PERCENTILES, "mean")
METRICS: tuple[str, ...] = tuple(d.name for d in metric_defs.PER_REQUEST)
_UNTIL = re.compile(
    r"^\s*(?P<stat>[a-z0-9_.]+)\s+(?P<metric>[a-z][a-z0-9_]*)\s*"
    r"(?:±|\+-|\+/-)\s*(?P<pct>[0-9]*\.?[0-9]+)\s*%\s*$"
)
GRAMMAR = (
    f"'stat metric ±pct%', e.g. 'p99 ttft_ms ±5%'; stat: {', '.join(STATS)}; metric: {', '.join(METRICS)}"
)


class Until(NamedTuple):
    """A precision to reach: the statistic and the half-width of its interval, as a fraction."""

    stat: str
    metric: str
    half_width: float

    def text(self) -> str:
        return f"{self.stat.replace('_', '.')} {self.metric} ±{self.half_width * 100:.4g}%"


def parse_until(text: str) -> Until:
    """``'p99 ttft_ms ±5%'`` -> its parts, checked against the registry; ``ValueError`` naming
    what is wrong and the grammar."""
    m = _UNTIL.match(text)
    if not m:
        raise ValueError(f"cannot parse {text!r}; grammar: {GRAMMAR}")
    stat, metric, pct = stat_key(m["stat"]), m["metric"], float(m["pct"])
    if stat not in STATS:
        raise ValueError(f"{text!r}: unknown stat {m['stat']!r}; valid: {', '.join(STATS)}")
    if metric not in METRICS:
        raise ValueError(f"{text!r}: {metric!r} is not a per-request latency; valid: {', '.join(METRICS)}")
    if not 0 < pct < 100:
        raise ValueError(f"{text!r}: the half-width {pct:g}% must be above 0 and below 100")
    return Until(stat, metric, pct / 100)
