"""The report's "Measurement fidelity" section: how far the client's own timestamps trailed the
built-in simulator's ground truth (``summary.fidelity``, ``loadgen.analysis.fidelity``).

Only a run the simulator served has the block, and only such a run gets the section: against
any other server there is no truth to measure the client against, and an empty section would
read as a clean bill. Like every section, it reads ``summary.json`` only (thresholds included),
so the report says what the run recorded even if the thresholds change later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from loadgen.analysis import fidelity
from loadgen.report.blocks import Alert, Section, Table, Text, num
from loadgen.summary import Fidelity, Summary

TITLE = "Measurement fidelity"
# Row labels of the block's distributions; a name of fidelity.FIELDS missing here shows as itself.
LABELS: dict[str, str] = {
    "first_token_lag_ms": "first-token lag",
    "chunk_lag_ms": "chunk lag",
    "ttft_error_ms": "TTFT error",
    "tpot_error_ms": "TPOT error",
    "e2e_error_ms": "E2E error",
}
COLUMNS: tuple[str, ...] = ("p50", "p99", "max")  # the stats shown of each distribution


def fidelity_sections(summary: Summary) -> list[Section]:
    """The section, in a list so the caller can splice it in: empty without a fidelity block."""
    block = summary.get("fidelity")
    if not isinstance(block, dict):
        return []
    parts: list = [verdict_alert(block)]
    busy = (summary.get("client") or {}).get("busy_machine")
    if block.get("verdict") == "fail" and busy:  # why the client trailed the server's log
        parts.append(Alert("warning", "Why", f"{busy[0].upper()}{busy[1:]}."))
    return [Section(TITLE, (*parts, distribution_table(block), Text(_explanation(block))))]


def verdict_alert(block: Fidelity) -> Alert:
    """The one-line verdict, with the reasons when it failed."""
    verdict = block.get("verdict")
    matched = (
        f"{block.get('requests_matched', 0):,} requests and {block.get('chunks_matched', 0):,} "
        "chunks matched against the simulator's ground truth"
    )
    unmatched = block.get("requests_unmatched") or 0
    if unmatched:
        matched += f", {unmatched:,} unmatched"
    if verdict == "pass":
        return Alert("ok", "Fidelity: PASS", f"{matched}; the client's stamps are within the thresholds.")
    if verdict == "fail":
        reasons = "; ".join(block.get("reasons") or []) or "no reason recorded"
        return Alert("error", "Fidelity: FAIL", f"{matched}: {reasons}.")
    return Alert("warning", "Fidelity: NO DATA", f"{matched}: no streamed request to measure.")


def distribution_table(block: Fidelity) -> Table:
    rows = []
    for name in fidelity.FIELDS:
        d = cast(Mapping[str, Any], block.get(name) or {})
        rows.append((LABELS.get(name, name), str(d.get("count", 0)), *(num(d.get(s), 3) for s in COLUMNS)))
    header = ("distribution (ms)", "n", *COLUMNS)
    return Table(header, tuple(rows), "l" + "r" * (len(header) - 1))


def _explanation(block: Fidelity) -> str:
    limits = " or ".join(
        f"{key.removesuffix('_p99_max')} p99 > {value:g} ms"
        for key, value in (block.get("thresholds") or {}).items()
    )
    return (
        "Lag: the client's stamp minus the simulator's stamp of the same token, both on one "
        "monotonic clock (per request for the first token; per chunk, to the last token it held). "
        "Error: the client's TTFT, TPOT or E2E minus the server's own figure for the same request "
        "(TTFT and E2E errors also hold the request's delivery to the server). The verdict fails "
        f"when {limits or 'a lag p99 is above its threshold'}, when an ok streamed request has no "
        "ground-truth line, or when a lag is below zero (the two stamps are not on one clock): "
        "above those, the latencies in this report hold more client delay than a reader would assume."
    )
