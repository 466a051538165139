"""The ``replicas`` block: a run over several replica URLs (``target.urls``), per replica beside the
pooled figures, and the replica that held the tail."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, with_config
from typing_extensions import TypedDict

from loadgen.summary.common import DOCS


@with_config(DOCS)
class ReplicaLatency(TypedDict, total=True):
    """median and 99th percentile of one latency over the replica's measured ok requests, ms"""

    p50: float | None
    """median, ms; null without a sample"""
    p99: float | None
    """99th percentile, ms; null without a sample"""


@with_config(DOCS)
class ReplicaRow(TypedDict, total=True):
    """one replica's measured requests; rates are per second of the run's window, so they add up"""

    replica: Annotated[int, Field(ge=0)]
    """its index in target.urls (the records' replica field)"""
    url: str
    """its URL, credentials redacted"""
    sent: Annotated[int, Field(ge=0)]
    """measured requests sent to it"""
    share: float | None
    """its part of the run's measured requests (0..1); null when none was measured"""
    ok: Annotated[int, Field(ge=0)]
    """of them, those that completed"""
    failed: Annotated[int, Field(ge=0)]
    """of them, those that failed (not ok, not cancelled)"""
    errors_by_class: dict[str, int]
    """its failures by error class (connect, read, timeout, http_5xx, ...)"""
    ttft_ms: ReplicaLatency
    tpot_ms: ReplicaLatency
    e2e_ms: ReplicaLatency
    output_tokens_per_s: float | None
    """its ok requests' output tokens per second of the run's window"""
    beyond_p99_ttft: Annotated[int, Field(ge=0)]
    """its ok requests slower than the pooled p99 TTFT"""
    beyond_p99_e2e: Annotated[int, Field(ge=0)]
    """its ok requests slower than the pooled p99 E2E"""


@with_config(DOCS)
class ReplicaTail(TypedDict, total=True):
    """which replica held the most of the requests beyond a pooled p99"""

    metric: str
    """ttft_ms or e2e_ms"""
    pooled_p99: float
    """the pooled p99 of the metric over every replica's measured ok requests, ms"""
    beyond: Annotated[int, Field(ge=0)]
    """measured ok requests beyond it, over every replica"""
    replica: Annotated[int, Field(ge=0)]
    """the replica holding the most of them (ties: the lower index)"""
    share_of_tail: float
    """its part of the requests beyond the pooled p99 (0..1)"""
    share_of_requests: float | None
    """its part of all the measured requests, to read the tail share against"""


@with_config(DOCS)
class Replicas(TypedDict, total=True):
    """runs over several replica URLs only (target.urls): each replica's figures beside the pooled ones
    (loadgen/analysis/replicas.py); counts sum over the rows to the run's counts"""

    balance: str
    """the policy that picked each request's replica: round_robin, least_in_flight or
    session_affinity (target.balance)"""
    by_replica: list[ReplicaRow]
    """one row per replica, in target.urls' order"""
    tail: list[ReplicaTail]
    """for TTFT and E2E, the replica holding the most of the requests beyond the pooled p99
    (absent for a metric with no request beyond it)"""
