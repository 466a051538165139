"""The summary's blocks for production-like traffic: the quality of the answers and the turns of
multi-turn sessions, from a run's record table.

``quality``: of the measured ok requests that carried an expected answer, how many were right
(``correct``, scored as each answer finished: exact or contains, ``loadgen.quality.score``).
``sessions``: how many conversations ran, how many turns each got, and TTFT per turn: on a
server with a prefix cache later turns carry more history but recompute only the new message,
so TTFT by turn shows the cache working (or not). ``shares_prefix``: whether a run's prompts
were built to share a prefix (when a prefix-cache hit rate of 0 means something). Data only:
the console's sentences for these blocks are ``cli.block_lines``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from loadgen.analysis.metrics import derived_columns, distribution
from loadgen.analysis.table import RecordTable
from loadgen.summary import Quality, Sessions

# Turns past this are reported together (the last row counts every later turn).
MAX_TURN_ROWS = 16


def quality(
    table: RecordTable, *, answers_kept: bool, max_chars: int, modelled: dict[str, Any] | None = None
) -> Quality | None:
    """Accuracy of the measured ok requests scored against an expected answer, and the valid
    share of those validated against a response_format's JSON schema; None when no request
    carried either and no answer was kept. ``modelled``: the simulator's account of its answers
    (they are a model, not a measurement), kept when any answer was scored."""
    measured = ~table.column("warmup")
    ok = table.column("ok") & measured
    correct = table.column("correct")
    scored = ok & ~np.isnan(correct)
    valid = table.column("json_valid")
    checked = ok & ~np.isnan(valid)
    kept = ok & (table.column("prompt_hash") != None)  # noqa: E711 - elementwise over objects
    if not scored.any() and not checked.any() and not answers_kept:
        return None
    n, right = int(scored.sum()), int((correct[scored] == 1.0).sum())
    block: Quality = {
        "scored": n,
        "correct": right,
        "accuracy": right / n if n else None,
        "answers_kept": int(kept.sum()),
        "answers_truncated": int((table.column("answer_truncated") & kept).sum()),
        "max_chars": max_chars if answers_kept else None,
    }
    if checked.any():
        n_json, n_valid = int(checked.sum()), int((valid[checked] == 1.0).sum())
        block["json_scored"], block["json_valid_answers"] = n_json, n_valid
        block["json_valid"] = n_valid / n_json
    if modelled and n:
        block["modelled"] = modelled
    return block


def sessions(table: RecordTable) -> Sessions | None:
    """Sessions, turns per session, and TTFT and prompt length by turn (measured ok requests);
    None for a run without sessions."""
    has = table.present("session_id")
    if not has.any():
        return None
    measured = ~table.column("warmup") & has
    ok = table.column("ok") & measured
    sid, _ = table.ints("session_id")
    turn, _ = table.ints("turn")
    ttft = derived_columns(table)["ttft_ms"]
    prompt, has_prompt = table.ints("prompt_tokens")
    ids = sid[measured]
    per_session = np.bincount(np.unique(ids, return_inverse=True)[1]) if ids.size else np.zeros(0)
    rows = []
    top = int(turn[ok].max()) if ok.any() else 0
    for k in range(1, min(top, MAX_TURN_ROWS) + 1):
        pick = ok & ((turn == k) if k < MAX_TURN_ROWS else (turn >= k))
        ttft_k = distribution(ttft[pick])
        rows.append(
            {
                "turn": k if k < MAX_TURN_ROWS else f"{k}+",
                "requests": int(pick.sum()),
                "ttft_ms": {key: ttft_k[key] for key in ("count", "mean", "p50", "p90", "p99")},
                "prompt_tokens_mean": _mean(prompt[pick & has_prompt]),
            }
        )
    block = {
        "sessions": int(np.unique(ids).size),
        "turns_per_session": distribution(per_session) if per_session.size else None,
        "failed_turns": int((measured & ~table.column("ok")).sum()),
        "by_turn": rows,
    }
    return cast(Sessions, block)


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


def shares_prefix(summary: Mapping[str, Any]) -> bool:
    """The run's prompts were built to share a prefix: a shared system prompt, multi-turn
    sessions or agent sessions (each turn or round repeats the history), or a trace whose
    blocks repeat."""
    t = (summary.get("conditions") or {}).get("traffic") or {}
    prefix = t.get("prefix") or {}
    trace = t.get("trace") or {}
    history = t.get("sessions") or t.get("agentic")
    return bool(prefix.get("shared_tokens") or history or trace.get("designed_prefix_reuse"))
