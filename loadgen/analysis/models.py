"""The ``models`` block: a LoRA mix's figures split by the model each request asked for.

Every measured request asked for exactly one model, so a row's counts partition the run's and
sum to them; rates are over the run's window (not each model's own span), so they sum too.
An adapter that has to be loaded before its prompt shows here as a higher TTFT than the base.
"""

from __future__ import annotations

import numpy as np

from loadgen.analysis import sla as sla_mod
from loadgen.analysis.counts import filled
from loadgen.analysis.distribution import distribution
from loadgen.analysis.metrics import derived_columns
from loadgen.analysis.table import RecordTable
from loadgen.records import CANCELLED
from loadgen.summary.models import ModelLatency, ModelRow, Models


def _latency(values: np.ndarray) -> ModelLatency:
    d = distribution(values)
    return {"p50": d["p50"], "p99": d["p99"]}


def models(
    table: RecordTable, names: tuple[str, ...], choice: str, seconds: float, sla: sla_mod.Sla | None
) -> Models | None:
    """Rows for ``names`` (the mix, in order) over the measured requests; None when no record
    names a model (a run without a mix). ``seconds``: the run's window."""
    model = table.column("model")
    if not (model != None).any():  # noqa: E711 - elementwise over objects
        return None
    keep = ~table.column("warmup")
    ok = table.column("ok")
    failed = ~ok & (table.column("error_class") != CANCELLED)
    derived = derived_columns(table)
    slos = sla_mod.set_slos(sla)
    good = sla_mod.good_mask(ok, {k: derived[k] for k in slos}, slos)
    out_tokens = filled(table, "output_tokens")

    def rate(x: int) -> float | None:
        return float(x / seconds) if seconds > 0 else None

    rows: list[ModelRow] = []
    for name in names:
        mine = keep & (model == name)
        mine_ok = mine & ok
        rows.append(
            {
                "model": name,
                "sent": int(mine.sum()),
                "ok": int(mine_ok.sum()),
                "failed": int((mine & failed).sum()),
                "ttft_ms": _latency(derived["ttft_ms"][mine_ok]),
                "tpot_ms": _latency(derived["tpot_ms"][mine_ok]),
                "e2e_ms": _latency(derived["e2e_ms"][mine_ok]),
                "output_tokens_per_s": rate(int(out_tokens[mine_ok].sum())),
                "goodput_requests_per_s": rate(int((mine & good).sum())),
            }
        )
    return {"choice": choice, "by_model": rows}
