"""How far the client's own timestamps trail the truth, whenever the built-in simulator served.

The simulator logs every request it served (``ground_truth.jsonl``) on the same monotonic clock
as the client's records (``perf_counter_ns``: CLOCK_MONOTONIC, one clock per machine), stamping
each token the instant before it writes it to the socket. So for each streamed request, matched
by the response id the server gave it:

- first-token lag = the client's first-token stamp - the server's stamp of its first token;
- chunk lag, for every chunk the client recorded = its stamp - the server's stamp of the last
  token the chunk held (the client may read several of the server's writes at once: a chunk
  cannot be complete before its last token was sent);
- the error of each request's TTFT, TPOT and E2E = the client's value - the server's own (from
  the request's arrival at the server, so TTFT and E2E errors also hold the request's delivery).

A pooling answer (embeddings, rerank: logged with its ``items``) is one write read whole: its
chunk lag is the client's end minus the server's stamp of the answer, its E2E error as above;
it has no first token.

No lag can be negative on one clock: a lag below ``-CLOCK_SLACK_MS`` means the two stamps are
not on one clock (a worker on another machine), and the verdict fails saying so. The verdict
also fails when a measured request the client counted as ok and streamed has no ground-truth
line, or when the p99 of either lag exceeds ``THRESHOLDS``: above that, latencies in the summary
hold more client delay than a reader would assume. ``problems`` is that judgement, also for
``loadgen selfcheck`` at its own threshold. Imports numpy, orjson, the analysis table and
metrics, and the registry's TPOT formula only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson

from loadgen import metric_defs
from loadgen.analysis.metrics import distribution
from loadgen.analysis.table import RecordTable
from loadgen.summary import Fidelity

# Verdict thresholds (ms): a lag p99 above these fails. The first token sets TTFT, and 1 ms is a
# tenth of the smallest ITL a GPU server streams at (about 10 ms). Chunks get twice that: when
# requests finish in the same engine step (they do, at equal lengths), the last chunk of each
# waits behind the client's turnover of the others (record written, next request sent): at
# c=4 here that is 0.6 ms median for a last chunk against 0.3 ms for the others.
THRESHOLDS: dict[str, float] = {"first_token_lag_ms": 1.0, "chunk_lag_ms": 2.0}
CLOCK_SLACK_MS = 0.05  # a lag below minus this is two clocks, not a fast network
# The block's distributions, in order (what compare and the gate may name), and how compare's
# rows and the gate's rules name a value of the block: "fidelity.chunk_lag_ms" (the registry's).
FIELDS: tuple[str, ...] = metric_defs.FIDELITY_FIELDS
PREFIX = metric_defs.FIDELITY_PREFIX


def assess(table: RecordTable, ground_truth: Path) -> Fidelity | None:
    """The ``fidelity`` block of a run whose server was the built-in simulator, or None when
    there is no ground-truth log to match (an external server)."""
    if not ground_truth.is_file():
        return None
    rows = _eligible_rows(table)
    ids = table.column("response_id")
    wanted = {ids[r]: int(r) for r in rows.tolist() if ids[r] is not None}
    base = table.chunk_base()
    lags = _Lags()
    matched = 0
    with open(ground_truth, "rb") as fh:
        for line in fh:
            try:
                truth = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line cut by a killed simulator: its request stays unmatched
            row = wanted.pop(truth.get("id"), None) if isinstance(truth, dict) else None
            if row is None:
                continue
            if truth.get("items") is not None and truth.get("finish_ns"):
                lags.add_whole(table, row, truth)  # a pooling answer, read whole
            elif not truth.get("stream") or not truth.get("chunk_ns"):
                continue
            else:
                lags.add(table, base, row, truth)
            matched += 1
    return cast(Fidelity, _block(lags, matched, len(wanted)))


def _eligible_rows(table: RecordTable) -> np.ndarray:
    """Measured ok requests that streamed at least one chunk, or got a pooling answer (items):
    the ones with a truth to meet."""
    answered = (table.chunks.counts > 0) | table.present("items")
    ok = table.column("ok") & ~table.column("warmup") & answered
    return np.flatnonzero(ok)


class _Lags:
    """The lags and errors of matched requests, gathered per request."""

    def __init__(self) -> None:
        self.first: list[int] = []
        self.chunks: list[np.ndarray] = []
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.e2e: list[float] = []

    def add(self, table: RecordTable, base: np.ndarray, row: int, truth: dict[str, Any]) -> None:
        server = np.asarray(truth["chunk_ns"], dtype=np.int64)
        counts = truth.get("chunk_tokens")
        if counts and len(counts) == len(server):  # an event of several tokens (a draft model's)
            server = np.repeat(server, np.maximum(np.asarray(counts, dtype=np.int64), 1))
        times = table.chunks.times(base[row : row + 1], row, row + 1)
        c0, c1 = int(table.chunks.offsets[row]), int(table.chunks.offsets[row + 1])
        tokens = np.maximum(np.asarray(table.chunks.tokens[c0:c1], dtype=np.int64), 0)
        held = np.minimum(np.cumsum(tokens), len(server))  # tokens received by each chunk's end
        has = held > 0  # a chunk of no token (a final usage event) has no token to meet
        self.chunks.append(times[has] - server[held[has] - 1])
        first, has_first = table.ints("t_first_token_ns")
        if not has_first[row]:
            return
        self.first.append(int(first[row]) - int(server[0]))
        send = int(table.column("t_send_ns")[row])
        arrival = int(truth["arrival_ns"])
        self.ttft.append(((int(first[row]) - send) - (int(server[0]) - arrival)) / 1e6)
        end, has_end = table.ints("t_end_ns")
        if has_end[row] and truth.get("finish_ns"):
            self.e2e.append(((int(end[row]) - send) - (int(truth["finish_ns"]) - arrival)) / 1e6)
        out, has_out = table.ints("output_tokens")
        if truth.get("tpot_ms") is not None and has_out[row] and out[row] >= 2 and len(times) >= 2:
            client_tpot = float(metric_defs.tpot_ms(int(first[row]), int(times[-1]), int(out[row])))
            self.tpot.append(client_tpot - float(truth["tpot_ms"]))

    def add_whole(self, table: RecordTable, row: int, truth: dict[str, Any]) -> None:
        """A pooling answer (embeddings, rerank): its one "chunk" is the whole answer, read by
        the client at its end and stamped by the server before its write; no first token."""
        end = int(table.ints("t_end_ns")[0][row])
        send = int(table.column("t_send_ns")[row])
        finish, arrival = int(truth["finish_ns"]), int(truth["arrival_ns"])
        self.chunks.append(np.asarray([end - finish], dtype=np.int64))
        self.e2e.append(((end - send) - (finish - arrival)) / 1e6)


def _block(lags: _Lags, matched: int, unmatched: int) -> dict[str, Any]:
    chunk_ns = np.concatenate(lags.chunks) if lags.chunks else np.empty(0, np.int64)
    dists = {
        "first_token_lag_ms": distribution(np.asarray(lags.first, dtype=np.float64) / 1e6),
        "chunk_lag_ms": distribution(chunk_ns / 1e6),
        "ttft_error_ms": distribution(lags.ttft),
        "tpot_error_ms": distribution(lags.tpot),
        "e2e_error_ms": distribution(lags.e2e),
    }
    reasons = problems({"requests_unmatched": unmatched, **dists})
    verdict = "no_data" if not matched else ("fail" if reasons else "pass")
    return {
        "source": "built-in simulator ground_truth.jsonl, matched by response id on one monotonic clock",
        "requests_matched": matched,
        "requests_unmatched": unmatched,
        "chunks_matched": int(chunk_ns.size),
        **dists,
        "thresholds": {f"{k}_p99_max": v for k, v in THRESHOLDS.items()},
        "verdict": verdict,
        "reasons": reasons,
    }


def thresholds_for(first_token_ms: float) -> dict[str, float]:
    """``THRESHOLDS`` scaled so the first-token bound is ``first_token_ms`` (``loadgen
    selfcheck --threshold-ms``): every lag keeps its ratio to the first token's."""
    scale = first_token_ms / THRESHOLDS["first_token_lag_ms"]
    return {name: limit * scale for name, limit in THRESHOLDS.items()}


def problems(block: Mapping[str, Any], thresholds: Mapping[str, float] = THRESHOLDS) -> list[str]:
    """Why a block's measurements fail (empty: they pass): requests without a ground-truth
    line, a lag p99 above its threshold, or a lag below ``-CLOCK_SLACK_MS`` (two clocks)."""
    reasons = []
    if block["requests_unmatched"]:
        reasons.append(
            f"{block['requests_unmatched']} ok requests have no line in the simulator's ground truth"
        )
    for name, limit in thresholds.items():
        p99 = block[name]["p99"]
        if p99 is not None and p99 > limit:
            reasons.append(f"{name} p99 {p99:.3f} ms > {limit:g} ms: the client trailed the server")
    for name in ("first_token_lag_ms", "chunk_lag_ms"):
        low = block[name]["min"]
        if low is not None and low < -CLOCK_SLACK_MS:
            reasons.append(f"{name} min {low:.3f} ms < 0: client and server stamps are not on one clock")
    return reasons


def lookup(summary: Mapping[str, Any], name: str, stat: str | None = None) -> Any:
    """The block's ``name`` in ``summary`` (a distribution of ``FIELDS`` as a dict, or with
    ``stat`` one of its stats; or a scalar such as ``requests_matched``); ``None`` wherever it
    is absent, as it is for a run the built-in simulator did not serve (no block at all)."""
    node: Any = summary.get("fidelity")
    for key in (name,) if stat is None else (name, stat):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node
