"""The server's own account of each request beside the client's: llama.cpp's ``timings``.

llama-server ends every response with what it spent on it: ``prompt_ms`` (prompt processing:
the prefill, after any wait for a slot) and ``predicted_ms`` over ``predicted_n`` generated
tokens. Paired request by request with the client's TTFT and TPOT, the difference is what the
HTTP layer, the wait for a slot and the client add (the same comparison ``server`` makes from
vLLM's histograms, here exact per request instead of mean over mean).
"""

from __future__ import annotations

import numpy as np

from loadgen.analysis.table import RecordTable


def server_timings(table: RecordTable, derived: dict[str, np.ndarray], rows: np.ndarray) -> dict | None:
    """``{"requests", "ttft", "tpot"}`` over the ``rows`` (measured ok requests) that carried
    timings; each of ttft and tpot holds the client's and the server's mean in ms and their
    difference (client minus server). None when no request carried any."""
    prompt = table.column("server_prompt_ms")
    predicted = table.column("server_predicted_ms")
    n, has_n = table.ints("server_predicted_tokens")
    with_prompt = rows & ~np.isnan(prompt)
    if not with_prompt.any():
        return None
    out: dict = {"requests": int(with_prompt.sum())}
    ttft = derived["ttft_ms"]
    both = with_prompt & ~np.isnan(ttft)
    out["ttft"] = _pair(ttft[both], prompt[both], "prompt_ms")
    tpot = derived["tpot_ms"]
    per_token = np.where(has_n & (n > 0), predicted / np.maximum(n, 1), np.nan)
    both = rows & ~np.isnan(tpot) & ~np.isnan(per_token)
    out["tpot"] = _pair(tpot[both], per_token[both], "predicted_ms / predicted_n")
    return out


def _pair(client: np.ndarray, server: np.ndarray, what: str) -> dict | None:
    if not len(client):
        return None
    c, s = float(client.mean()), float(server.mean())
    return {
        "requests": len(client),
        "client_mean_ms": c,
        "server_mean_ms": s,
        "difference_ms": c - s,
        "server": what,
    }
