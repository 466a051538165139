"""The client's side of the client-vs-server comparison: its means of the latencies a server's
own histograms also measure (``metric_defs.SERVER_COMPARED``), and their differences.

Why in analysis: these are client figures, computed from the records with the registry's
formulas like every other latency; ``server/`` only reads the server's histograms and sets them
beside these. Pure: records in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from loadgen import metric_defs
from loadgen.analysis.gaps import GapSamples
from loadgen.analysis.table import as_table
from loadgen.metric_defs import MetricDef

__all__ = ["COMPARED", "Compared", "client_means", "client_vs_server"]


class Compared(NamedTuple):
    """One row of the comparison: the client's key ("ttft", as in summary.json's
    ``server.client_vs_server``), the server histogram of the same quantity, and the label."""

    key: str
    histogram: str
    label: str


def _row(d: MetricDef) -> Compared:
    assert d.server_histogram is not None
    return Compared(d.name.removesuffix("_ms"), d.server_histogram, d.label)


COMPARED: tuple[Compared, ...] = tuple(_row(d) for d in metric_defs.SERVER_COMPARED)


def client_means(records: Any) -> dict[str, float | None]:
    """The client's mean of each ``COMPARED`` latency in ms over every ok request, warm-up
    included: the server's histogram deltas count those too. ``records``: a ``RecordTable`` or
    a sequence of records.

    A per-request latency is its registry formula's mean; TPOT only over requests that streamed
    two chunks or more (one chunk of several tokens has a client TPOT of 0 however the server
    paced them). ITL per chunk: the gaps between consecutive content chunks; per token: the
    same gaps summed and divided among the tokens the later chunks carried (sum of gaps / sum of
    their tokens)."""
    t = as_table(records)
    ok = t.column("ok").astype(bool)
    streamed = ok & (t.column("n_chunks") >= 2)
    gaps = GapSamples(t, streamed)
    gaps_ns = sum(int(g.sum(dtype=np.int64)) for g, _ in gaps.raw_blocks())
    tokens = int(gaps.tokens().sum())
    gap_means = {
        "chunk_gaps": gaps_ns / gaps.gaps / 1e6 if gaps.gaps else None,
        "token_gaps": gaps_ns / tokens / 1e6 if tokens else None,
    }
    out: dict[str, float | None] = {}
    for d, row in zip(metric_defs.SERVER_COMPARED, COMPARED):
        if d.formula is None:
            out[row.key] = gap_means[str(d.samples)]
            continue
        rows = d.formula.defined(t) & (streamed if d.formula.per_token else ok)
        if not rows.any():
            out[row.key] = None
        elif d.formula.per_token:
            out[row.key] = float(d.formula(t)[rows].mean())
        else:  # an int sum divides exactly
            out[row.key] = d.formula.delta_ns(t)[rows].sum().item() / int(rows.sum()) / 1e6
    return out


def client_vs_server(histograms: Mapping[str, Any], client: Mapping[str, float | None]) -> dict:
    """``server.client_vs_server``: per ``COMPARED`` row both have, the client's mean, the
    server's (``histograms[h]["mean_ms"]``) and the client's minus the server's: what HTTP, the
    network and the client add on top of what the server measured itself."""
    out = {}
    for key, hist, _label in COMPARED:
        server = (histograms.get(hist) or {}).get("mean_ms")
        ours = client.get(key)
        if server is None or ours is None:
            continue
        out[key] = {"client_mean_ms": ours, "server_mean_ms": server, "difference_ms": ours - server}
    return out
