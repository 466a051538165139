"""The ``agentic`` block: per-session figures of an agent's rounds (workload.agentic, tools.rounds)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, with_config
from typing_extensions import TypedDict

from loadgen.summary.common import DOCS


@with_config(DOCS)
class AgenticStat(TypedDict, total=True):
    """a per-session figure across the sessions (numpy linear-interpolation percentiles); null
    stats when no session was measured"""

    mean: float | None
    """arithmetic mean over the sessions"""
    p50: float | None
    """median session"""
    p99: float | None
    """99th percentile"""
    max: float | None
    """largest session's"""


@with_config(DOCS)
class AgenticPrefixCache(TypedDict, total=True):
    """the prefix-cache hit the rounds achieved, as the server's /metrics counted it (prompt
    tokens found cached over those looked up during the run)"""

    hit_rate: Annotated[float | None, Field(ge=0, le=1)]
    """hits / queries; null when nothing was queried"""
    source: str
    """where the figure comes from: "server /metrics" """


@with_config(DOCS)
class Agentic(TypedDict, total=True):
    """agentic runs only (workload.agentic, or workload.tools with rounds > 1): each session's
    rounds, its time from its first round's send to its last round's end, and how that time
    split between waiting on the server (some round in flight) and on tools (no round in
    flight: the tools' or harness's run time, plus any client lag), across the measured
    sessions (loadgen/analysis/agentic.py)"""

    kind: str
    """what made the sessions: tool_rounds, code_session, aiperf, otlp, or tools (tools.rounds)"""
    sessions: Annotated[int, Field(ge=0)]
    """distinct sessions among the measured requests"""
    rounds: Annotated[int, Field(ge=0)]
    """measured rounds (requests) in all"""
    failed_rounds: Annotated[int, Field(ge=0)]
    """measured rounds that failed (a failed round ends its session, or its calls' children)"""
    rounds_per_session: AgenticStat
    session_s: AgenticStat
    """seconds from a session's first send to its last round's end"""
    server_wait_s: AgenticStat
    """seconds of a session during which at least one of its rounds was in flight"""
    tool_wait_s: AgenticStat
    """seconds of a session during which none was: session_s minus server_wait_s"""
    server_share: float | None
    """all sessions' server wait over their time; null without session time"""
    prefix_cache: AgenticPrefixCache | None
    """the server's view of the prefix cache; null when its /metrics had no prefix-cache counters"""
