"""The ``agentic`` block from a run's records: per-session rounds, time, and its split.

An agent's session spends its time in two places: waiting on the server (a round in flight)
and waiting on its tools (between an answer and the next round). Which one dominates decides
what to tune, and a prefix cache must keep a session's blocks across the tool waits. Server
wait is the union of the session's rounds' [send, end] intervals, so a DAG's parallel calls
count once; tool wait is the rest of the session's span. The prefix-cache hit is the
server's own count (the server block's, from /metrics), never guessed from the client side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from loadgen.analysis.table import RecordTable
from loadgen.summary.agentic import Agentic, AgenticStat


def stat(values: np.ndarray) -> AgenticStat:
    """mean, p50, p99 and max of ``values`` (nulls for none)."""
    if not values.size:
        return {"mean": None, "p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(values, [50, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p99": float(p99), "max": float(values.max())}


def busy_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Nanoseconds covered by the union of the intervals [starts, ends]."""
    order = np.argsort(starts, kind="stable")
    total, cur_start, cur_end = 0, None, None
    for a, b in zip(starts[order].tolist(), ends[order].tolist()):
        if cur_end is None or a > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    return total + (cur_end - cur_start if cur_end is not None else 0)


def per_session(table: RecordTable) -> dict[int, tuple[int, float, float]]:
    """{session id: (rounds, session seconds, server-wait seconds)} over the measured records."""
    has = table.present("session_id") & ~table.column("warmup")
    sid, _ = table.ints("session_id")
    send = table.column("t_send_ns").astype(np.int64)
    end, has_end = table.ints("t_end_ns")
    end = np.where(has_end, end, send)  # a round that never ended took no time
    out = {}
    for s in np.unique(sid[has]).tolist():
        pick = has & (sid == s)
        a, b = send[pick], end[pick]
        out[int(s)] = (int(pick.sum()), (int(b.max()) - int(a.min())) / 1e9, busy_ns(a, b) / 1e9)
    return out


def agentic(table: RecordTable, kind: str, server: Mapping[str, Any] | None) -> Agentic:
    """The block for a run whose sessions ``kind`` made; ``server``: the run's server block."""
    sessions = per_session(table)
    rows = np.array(list(sessions.values()), dtype=float).reshape(-1, 3)
    measured = table.present("session_id") & ~table.column("warmup")
    prefix = (server or {}).get("prefix_cache")
    total = float(rows[:, 1].sum())
    block = {
        "kind": kind,
        "sessions": len(sessions),
        "rounds": int(measured.sum()),
        "failed_rounds": int((measured & ~table.column("ok")).sum()),
        "rounds_per_session": stat(rows[:, 0]),
        "session_s": stat(rows[:, 1]),
        "server_wait_s": stat(rows[:, 2]),
        "tool_wait_s": stat(np.maximum(rows[:, 1] - rows[:, 2], 0.0)),
        "server_share": float(rows[:, 2].sum()) / total if total > 0 else None,
        "prefix_cache": {"hit_rate": prefix["hit_rate"], "source": "server /metrics"} if prefix else None,
    }
    return cast(Agentic, block)
