"""Reports of one saved run: ``report.md``, a self-contained ``report.html``, ``plots/*.png``,
``requests.csv``, ``requests.parquet`` and, when a GPU price is known, ``cost.json``.

Works from the saved files alone (no server): ``write_report("reports/run-a")``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from loadgen.analysis.cost import CostError, CostInputs, cost_figures, cost_inputs
from loadgen.errors import LoadgenError
from loadgen.result import load_summary, load_table
from loadgen.summary import Summary

if TYPE_CHECKING:
    import pandas as pd

    from loadgen.analysis.table import RecordTable
    from loadgen.report.blocks import Image
    from loadgen.report.plots import Plot

__all__ = [
    "COST_JSON",
    "PLOTS_DIR",
    "REPORT_HTML",
    "REPORT_MD",
    "REQUESTS_CSV",
    "REQUESTS_PARQUET",
    "CostError",
    "CostInputs",
    "ReportError",
    "cost_figures",
    "cost_inputs",
    "write_report",
]

REPORT_MD, REPORT_HTML = "report.md", "report.html"
REQUESTS_CSV, REQUESTS_PARQUET, COST_JSON, PLOTS_DIR = (
    "requests.csv",
    "requests.parquet",
    "cost.json",
    "plots",
)


_PARQUET_ROWS = 16384  # rows per Parquet row group


class ReportError(LoadgenError):
    """A report that cannot be written (e.g. Parquet support is not installed)."""


def write_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    gpu_hour_cost: float | None = None,
    gpu_count: float | None = None,
) -> dict[str, Path]:
    """Write the report files of the run in ``run_dir`` into ``out_dir`` (default: the run dir).

    ``gpu_hour_cost`` (USD per GPU-hour) and ``gpu_count`` override the run's labels
    ``gpu_hour_cost`` / ``gpu_count``; without a price there is no ``cost.json`` and the
    report's cost section says how to get one. Returns every file written, keyed by its path
    relative to ``out_dir`` ("report.md", "plots/cdf_ttft.png", ...).
    Raises ``loadgen.result.ResultError`` for a directory that is not a readable run,
    ``CostError`` for a price or count that is not a positive number, ``ReportError`` when
    pyarrow (Parquet) is missing.
    """
    from loadgen.memory import give_back_freed_memory

    give_back_freed_memory()  # after `loadgen run`, the load's freed heap would add to this peak
    from loadgen.analysis.metrics import request_frame
    from loadgen.report.html import render_html
    from loadgen.report.interactive import interactive_section, with_interactive
    from loadgen.report.markdown import render_markdown
    from loadgen.report.plots import chunk_plots
    from loadgen.report.sections import build_sections

    summary = load_summary(run_dir)
    table = load_table(run_dir)  # columns, a few bytes a chunk: never the records as objects
    early = chunk_plots(summary, table)  # the plots of the chunk lists; then the lists are freed
    table = table.without_chunks()
    inputs = cost_inputs(
        (summary.get("conditions") or {}).get("labels"), gpu_hour_cost=gpu_hour_cost, gpu_count=gpu_count
    )
    cost = cost_figures(summary, inputs) if inputs is not None else None

    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    (out / PLOTS_DIR).mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def put(rel: str, data: bytes) -> None:
        path = out / rel
        path.write_bytes(data)
        written[rel] = path

    sections = build_sections(summary, cost, _write_plots(summary, table, early, run_dir, put))
    sections = with_interactive(sections, interactive_section(summary, table))
    title = f"loadgen report: {summary.get('run_id')}"
    put(REPORT_MD, render_markdown(title, sections).encode())
    put(REPORT_HTML, render_html(title, sections).encode())
    if cost is not None:
        put(COST_JSON, orjson.dumps(cost, option=orjson.OPT_INDENT_2) + b"\n")
    frame = request_frame(table)
    del table  # the frame holds all the files need: the table goes before pyarrow copies it
    written.update(write_frame(frame, out))
    return dict(sorted(written.items()))


def _write_plots(
    summary: Summary,
    table: RecordTable,
    early: dict[str, Plot],
    run_dir: str | Path,
    put: Callable[[str, bytes], None],
) -> list[Image]:
    """Every plot of the run as ``plots/<name>.png`` (through ``put``), in the report's order:
    the run's own (``early``: those of the chunk lists, drawn before they were freed), a
    multi-stage run's curves, the server's view; returned as the report's images."""
    from loadgen.report import telemetry_plot
    from loadgen.report.blocks import Image
    from loadgen.report.curve import render_curve_plots
    from loadgen.report.plots import render_plots
    from loadgen.report.server import load_rows, server_plot

    images = []
    gpu_rows = telemetry_plot.load_rows(run_dir)
    server = server_plot(summary, table, load_rows(run_dir), gpu_rows)
    gpus = telemetry_plot.telemetry_plot(summary, gpu_rows)
    curve_plots = render_curve_plots(summary)  # a multi-stage run's curves (none for one stage)
    extra = [p for p in (server, gpus) if p is not None]
    for plot in render_plots(summary, table, early) + curve_plots + extra:
        rel = f"{PLOTS_DIR}/{plot.name}.png"
        put(rel, plot.png)
        images.append(Image(rel, plot.title, plot.caption, plot.png))
    return images


def write_frame(frame: pd.DataFrame, out_dir: Path) -> dict[str, Path]:
    """``requests.csv`` and ``requests.parquet`` of a ``metrics.request_frame``. The Parquet
    file is written a row group of ``_PARQUET_ROWS`` rows at a time against the whole frame's
    schema (the same file ``frame.to_parquet`` writes, read back as the same frame): pyarrow
    never holds a copy of the whole frame."""
    csv_path, parquet_path = out_dir / REQUESTS_CSV, out_dir / REQUESTS_PARQUET
    frame.to_csv(csv_path, index=False)
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ReportError(f"cannot write {REQUESTS_PARQUET}: {exc} (pip install pyarrow)") from None
    schema = pa.Schema.from_pandas(frame, preserve_index=False)
    with pq.ParquetWriter(parquet_path, schema) as writer:
        for start in range(0, max(len(frame), 1), _PARQUET_ROWS):
            part = frame.iloc[start : start + _PARQUET_ROWS]
            writer.write_table(pa.Table.from_pandas(part, schema=schema, preserve_index=False))
    return {REQUESTS_CSV: csv_path, REQUESTS_PARQUET: parquet_path}
