"""The "Interactive" section of report.html: SLO inputs and a percentile picker that recompute
the verdict and goodput from the embedded per-request data, a load slider over a multi-stage
run's curves, a zoomable per-request timeline, and the slowest requests.

The page stays one file that opens offline: the data is JSON in a ``<script
type="application/json">`` tag (``interactive_data``), the chart library (uPlot, MIT, its
licence in ``assets/uPlot.LICENSE``) and the page's own scripts (``assets/interactive.js``,
``assets/timeline.js``) are inlined from this package's ``assets``. report.md gets the
slowest-requests table and a sentence pointing at report.html.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from html import escape
from importlib import resources

import numpy as np
import orjson

from loadgen import metric_defs
from loadgen.analysis.table import RecordTable
from loadgen.report.blocks import Markup, Section, Table, Text, num
from loadgen.report.interactive_data import (
    KEEP_SLOWEST,
    SLOWEST_ROWS,
    Ranked,
    embedded_data,
    ranked,
    run_slos,
)
from loadgen.summary import Summary

__all__ = ["TITLE", "interactive_section", "sample_text", "slowest_table", "with_interactive"]

TITLE = "Interactive"


def with_interactive(sections: Sequence[Section], section: Section) -> list[Section]:
    """``sections`` with ``section`` placed before the last ("Plots"), or at the end."""
    out = list(sections)
    at = next((i for i, s in enumerate(out) if s.title == "Plots"), len(out))
    out.insert(at, section)
    return out


def interactive_section(summary: Summary, table: RecordTable) -> Section:
    runs = ranked(table, run_slos(summary))
    data = embedded_data(summary, runs)
    note = sample_text(data["sample"])
    return Section(
        TITLE,
        (
            Markup(_page(data, note), "report.html has this section interactive: " + note),
            Text(
                f"The {SLOWEST_ROWS} slowest measured requests of the run (send to end of stream or "
                "failure; latencies in ms):"
            ),
            slowest_table(runs),
        ),
    )


def sample_text(sample: dict) -> str:
    """What the page embeds, in words: every request, or a down-sample with its counts."""
    if not sample["sampled"]:
        return f"All {sample['measured']:,} measured requests are embedded (warm-up excluded)."
    return (
        f"Down-sampled: {sample['embedded']:,} of {sample['measured']:,} measured requests are "
        f"embedded (the {sample['slowest_kept']:,} slowest, always, and "
        f"{sample['embedded'] - sample['slowest_kept']:,} of the others drawn uniformly with seed "
        f"{sample['seed']}, each standing for {sample['weight']:.3g} requests); the verdict, goodput "
        "and percentiles below are estimated from the sample."
    )


def slowest_table(runs: Ranked) -> Table:
    """The ``SLOWEST_ROWS`` slowest measured requests (send to end of stream or failure), of
    every request, sampled or not: their record fields and SLO latencies (ms)."""
    t = runs.table
    send = t.column("t_send_ns")
    end, has_end = t.ints("t_end_ns")

    def count(name: str, r: int) -> str:
        values, present = t.ints(name)
        return str(int(values[r])) if present[r] else "-"

    def ms(values: np.ndarray, r: int) -> str:
        return "-" if np.isnan(values[r]) else num(float(values[r]))

    out = tuple(
        (
            str(int(t.column("id")[r])),
            str(int(t.column("stage")[r])),
            count("prompt_tokens", r),
            count("output_tokens", r),
            *(ms(values, r) for values in runs.latency.values()),
            num((int(end[r]) - int(send[r])) / 1e6) if has_end[r] else "-",
            "ok" if t.column("ok")[r] else str(t.column("error_class")[r] or "unknown"),
        )
        for r in (int(x) for x in runs.order[:SLOWEST_ROWS])
    )
    labels = tuple(metric_defs.get(name).label for name in runs.latency)
    header = ("id", "stage", "prompt tokens", "output tokens", *labels, "send to end", "result")
    return Table(header, out, "lrrr" + "r" * len(labels) + "rl")


def _page(data: dict, note: str) -> str:
    """The section's markup: the controls, the places the script draws into, the data, the
    script. Every value shown before the script runs is escaped; the JSON cannot close its tag."""
    payload = orjson.dumps(data).decode().replace("</", "<\\/")
    css, lib_css = _asset("interactive.css"), _asset("uPlot.min.css")
    slo_inputs = "".join(
        f'<label>{escape(s["label"])} &le; <input type="number" min="0" step="any" '
        f'id="lg-slo-{escape(s["name"])}" data-slo="{escape(s["name"])}" '
        f'value="{_g(s["value"])}"> ms</label> '
        for s in data["slos"]
    )
    pcts = "".join(
        f'<option value="{escape(k)}"{" selected" if k == "p99" else ""}>{escape(k.replace("_", "."))}'
        "</option>"
        for k in data["percentiles"]
    )
    sample = data["sample"]
    sample_attrs = (
        f'data-sampled="{str(sample["sampled"]).lower()}" data-measured="{sample["measured"]}" '
        f'data-embedded="{sample["embedded"]}"'
    )
    curve = ""
    if data["curve"] is not None:
        curve = (
            '<h3>Load curves</h3><div class="lg-row"><label>load <input type="range" id="lg-load"></label> '
            '<output id="lg-load-value"></output></div><table id="lg-load-read"></table>'
            '<div class="lg-plots" id="lg-curves"></div>'
        )
    return f"""<div id="lg-interactive" class="lg-i">
<style>{lib_css}
{css}</style>
<p id="lg-sample" {sample_attrs}>{escape(note)}</p>
<noscript><p>This section needs JavaScript; the tables above hold the run's own figures.</p></noscript>
<div class="lg-row">SLOs: {slo_inputs}<label>percentile <select id="lg-pct">{pcts}</select></label>
<span class="lg-hint">error rate &le; {data["run"]["max_error_rate"]:g}
(the run's sla.max_error_rate)</span></div>
<div class="lg-row">verdict <output id="lg-verdict" data-verdict=""></output>
goodput <output id="lg-goodput" data-value=""></output> req/s,
<output id="lg-goodput-tokens" data-value=""></output> output tokens/s,
attained <output id="lg-attained" data-value=""></output></div>
<table id="lg-rules"></table>
<p class="lg-hint">Here the verdict is the run's error-rate rule and, for each SLO set, its chosen
percentile &le; the SLO; the run's own rules are judged in "SLA and goodput" above. Goodput:
requests (ok, within every SLO set) per second of the measured window ({num(data["run"]["seconds"], 3)} s);
failed requests count against the attained fraction. The URL keeps the inputs
(e.g. #slo.ttft_ms=200&amp;pct=p90).</p>
<h3>Distributions</h3><div class="lg-plots" id="lg-cdfs"></div>
{curve}
<h3>Requests over time</h3>
<div class="lg-row"><button type="button" id="lg-slowest">slowest</button>
<button type="button" id="lg-reset">reset zoom</button>
<span class="lg-hint">a line per request, by send time: send to first token (grey), first to last token
(green: its TPOT, the mean ITL, within the TPOT SLO; red: over it; blue: no TPOT SLO or one token),
to the end; failures in black. Drag to zoom, wheel to zoom around the pointer, double-click to reset;
"slowest" zooms to the next slowest request (the {KEEP_SLOWEST} slowest are kept even when
down-sampled).</span></div>
<div id="lg-timeline"></div><div id="lg-hover" class="lg-hint">&nbsp;</div>
<script type="application/json" id="lg-data">{payload}</script>
<script>{_asset("uPlot.iife.min.js")}</script>
<script>{_asset("timeline.js")}</script>
<script>{_asset("interactive.js")}</script>
</div>"""


def _g(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


@cache
def _asset(name: str) -> str:
    return (resources.files("loadgen.report") / "assets" / name).read_text(encoding="utf-8")
