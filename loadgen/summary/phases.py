"""The ``http_phases`` block: where a request's time went below the protocol, phase by phase,
and how often its connection was reused (docs/metrics.md defines each phase)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, with_config
from typing_extensions import TypedDict

from loadgen.summary.common import DOCS, Distribution


@with_config(DOCS)
class PhaseDistributions(TypedDict, total=True):
    """each phase's durations in ms over the measured requests that went through it (its
    count says how many: a reused connection has no dns, connect or tls)"""

    dns: Distribution
    """resolving the host: t_dns_ns - t_conn_start_ns (an IP literal: no lookup, about 0)"""
    connect: Distribution
    """the TCP handshake: t_connect_ns - t_dns_ns (httpx on a host name: from t_conn_start_ns,
    its resolution included)"""
    tls: Distribution
    """the TLS handshake: t_tls_ns - t_connect_ns (https:// only)"""
    write: Distribution
    """writing the request: t_written_ns - the end of the handshake (a fresh connection), or
    - t_send_ns (a reused one)"""
    wait: Distribution
    """waiting for the answer: t_first_byte_ns - t_written_ns"""
    download: Distribution
    """reading the answer: t_last_byte_ns - t_first_byte_ns"""


@with_config(DOCS)
class HttpPhases(TypedDict, total=True):
    """runs over a transport that stamps HTTP phases (httptools, httpx): the measured requests'
    phases and connection reuse (loadgen/analysis/phases.py)"""

    requests: Annotated[int, Field(ge=0)]
    """measured requests whose transport stamped their phases"""
    fresh_connections: Annotated[int, Field(ge=0)]
    """of them, those sent on a connection opened for them"""
    reused_connections: Annotated[int, Field(ge=0)]
    """those sent on a connection that had carried a request before"""
    reuse_rate: float | None
    """reused_connections / requests; null without requests"""
    tls_handshakes: Annotated[int, Field(ge=0)]
    """fresh connections that did a TLS handshake"""
    phases_ms: PhaseDistributions
