"""The ``http_phases`` block: each measured request's HTTP phases, from the transport's stamps.

A phase is the gap between two stamps the transport took (records.py, docs/metrics.md), counted
for a request only when both exist: a reused connection has no dns, connect or tls, a plain
connection no tls, a request the server never answered no wait or download. Every measured
request counts, whatever its outcome: a 429's wait is as real as a 200's. A run whose transport
stamps nothing (aiohttp) has no block.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from loadgen.analysis.distribution import distribution
from loadgen.analysis.table import RecordTable
from loadgen.summary.common import Distribution
from loadgen.summary.phases import HttpPhases, PhaseDistributions

MS = 1e6


def http_phases(table: RecordTable) -> HttpPhases | None:
    """The block, or None when no measured request has its phases stamped."""
    reused = table.column("conn_reused")
    keep = ~table.column("warmup") & ~np.isnan(reused)
    if not keep.any():
        return None
    t = table.select(keep)

    def stamp(name: str) -> tuple[np.ndarray, np.ndarray]:
        values, present = t.ints(name)
        return values.astype(np.float64), present

    start, dns, conn, tls = (stamp(k) for k in ("t_conn_start_ns", "t_dns_ns", "t_connect_ns", "t_tls_ns"))
    written, first, last = (stamp(k) for k in ("t_written_ns", "t_first_byte_ns", "t_last_byte_ns"))
    send = (t.column("t_send_ns").astype(np.float64), np.ones(len(t), dtype=bool))

    def gap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """b - a in ms where both were stamped, NaN elsewhere."""
        return np.where(a[1] & b[1], (b[0] - a[0]) / MS, np.nan)

    connect_from = _first_of(dns, start)
    write_from = _first_of(tls, conn, send)
    phases: PhaseDistributions = {
        "dns": _stats(gap(start, dns)),
        "connect": _stats(gap(connect_from, conn)),
        "tls": _stats(gap(conn, tls)),
        "write": _stats(gap(write_from, written)),
        "wait": _stats(gap(written, first)),
        "download": _stats(gap(first, last)),
    }
    n = len(t)
    n_reused = int((t.column("conn_reused") == 1).sum())
    return {
        "requests": n,
        "fresh_connections": n - n_reused,
        "reused_connections": n_reused,
        "reuse_rate": n_reused / n,
        "tls_handshakes": int(tls[1].sum()),
        "phases_ms": phases,
    }


def _first_of(*stamps: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the first of ``stamps`` that was taken (the phase before it ended there)."""
    values, present = stamps[-1]
    for v, p in reversed(stamps[:-1]):
        values, present = np.where(p, v, values), p | present
    return values, present


def _stats(ms: np.ndarray) -> Distribution:
    return cast(Distribution, distribution(ms))
