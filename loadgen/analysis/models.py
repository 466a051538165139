"""The ``models`` block: a LoRA mix's figures split by the model each request asked for.

Every measured request asked for exactly one model, so a row's counts partition the run's and
sum to them; rates are over the run's window (not each model's own span), so they sum too.
An adapter that has to be loaded before its prompt shows here as a higher TTFT than the base.
"""

from __future__ import annotations

from loadgen.analysis import sla as sla_mod
from loadgen.analysis.groups import Split
from loadgen.analysis.table import RecordTable
from loadgen.summary.models import ModelRow, Models


def models(
    table: RecordTable, names: tuple[str, ...], choice: str, seconds: float, sla: sla_mod.Sla | None
) -> Models | None:
    """Rows for ``names`` (the mix, in order) over the measured requests; None when no record
    names a model (a run without a mix). ``seconds``: the run's window."""
    model = table.column("model")
    if not (model != None).any():  # noqa: E711 - elementwise over objects
        return None
    split = Split.of(table, seconds)
    slos = sla_mod.set_slos(sla)
    good = sla_mod.good_mask(split.ok, {k: split.derived[k] for k in slos}, slos)
    rows: list[ModelRow] = []
    for name in names:
        mine = split.measured & (model == name)
        row = split.figures(mine)
        rows.append({"model": name, **row, "goodput_requests_per_s": split.rate(int((mine & good).sum()))})
    return {"choice": choice, "by_model": rows}
