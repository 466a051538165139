"""The ``replicas`` block: a run over several replica URLs, split by the replica each request went to.

Every measured request went to exactly one replica (its record's ``replica``), so the rows'
counts partition the run's and sum to them; rates are over the run's window, so they sum too.
Which replica dragged the tail is read against the pooled p99: the requests beyond it are the
run's tail, and the replica holding the largest share of them, set beside its share of all the
requests, is the one a reader should look at (a slow GPU, a replica that lost its cache).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadgen.analysis.distribution import distribution
from loadgen.analysis.groups import Split
from loadgen.analysis.table import RecordTable
from loadgen.summary.replicas import ReplicaRow, Replicas, ReplicaTail

TAIL_METRICS = ("ttft_ms", "e2e_ms")  # the latencies whose pooled p99 the tail is read against


def replicas(table: RecordTable, urls: Sequence[str], balance: str, seconds: float) -> Replicas | None:
    """Rows for ``urls`` (target.urls, redacted, in order) over the measured requests; None when
    no record names a replica (a run against one URL). ``seconds``: the run's window."""
    index, has = table.ints("replica")
    if not has.any():
        return None
    split = Split.of(table, seconds)
    error = table.column("error_class")
    measured = int(split.measured.sum())
    settled = split.measured & split.ok
    pooled = {m: distribution(split.derived[m][settled])["p99"] for m in TAIL_METRICS}
    beyond = {
        m: settled & (split.derived[m] > p99) if p99 is not None else np.zeros(len(table), bool)
        for m, p99 in pooled.items()
    }

    rows: list[ReplicaRow] = []
    for i, url in enumerate(urls):
        mine = split.measured & has & (index == i)
        row = split.figures(mine)
        classes, counts = np.unique(error[mine & split.failed].astype(str), return_counts=True)
        rows.append(
            {
                "replica": i,
                "url": url,
                "share": float(row["sent"] / measured) if measured else None,
                **row,
                "errors_by_class": {str(c): int(n) for c, n in zip(classes, counts, strict=True)},
                "beyond_p99_ttft": int((mine & beyond["ttft_ms"]).sum()),
                "beyond_p99_e2e": int((mine & beyond["e2e_ms"]).sum()),
            }
        )
    return {"balance": balance, "by_replica": rows, "tail": _tail(rows, pooled)}


def _tail(rows: list[ReplicaRow], pooled: dict[str, float | None]) -> list[ReplicaTail]:
    """Per tail metric, the replica holding the most requests beyond the pooled p99."""
    out: list[ReplicaTail] = []
    for metric in TAIL_METRICS:
        p99 = pooled[metric]
        counts = [r["beyond_p99_ttft"] if metric == "ttft_ms" else r["beyond_p99_e2e"] for r in rows]
        total = sum(counts)
        if p99 is None or total == 0:
            continue
        worst = counts.index(max(counts))  # ties: the lower index
        out.append(
            {
                "metric": metric,
                "pooled_p99": float(p99),
                "beyond": total,
                "replica": rows[worst]["replica"],
                "share_of_tail": counts[worst] / total,
                "share_of_requests": rows[worst]["share"],
            }
        )
    return out
