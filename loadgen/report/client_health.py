"""The report's sections on whether the run's numbers can be trusted: the client's own health
(its send and event-loop lag, CPU, warnings, the machine's self-check ceiling beside the load
asked for) and Little's law (were the averages those of a steady state)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.report.blocks import Alert, Section, Table, num, pct
from loadgen.summary import Summary

LITTLE_TOLERANCE = 0.10  # |ratio - 1| beyond this: the averages do not describe a steady state


def client_section(summary: Summary) -> Section:
    client = summary.get("client") or {}
    lag = (summary.get("metrics") or {}).get("client_lag_ms") or {}
    loop = client.get("event_loop_lag_ms") or {}
    blocks: list = [
        Alert("warning", f"{w.get('warning')}:", warning_text(w)) for w in client.get("warnings") or []
    ]
    if not blocks:
        blocks.append(
            Alert(
                "ok",
                "The client kept up:",
                "no sign that the load generator, rather than the server, limited this run.",
            )
        )
    busy = client.get("cpu_busy_fraction")
    blocks.append(
        Table(
            ("client health", "value"),
            (
                (
                    "send lag (send - scheduled), ms",
                    f"p50 {num(lag.get('p50'))}, p99 {num(lag.get('p99'))}, max {num(lag.get('max'))}",
                ),
                (
                    "event-loop lag, ms",
                    f"p50 {num(loop.get('p50'))}, p99 {num(loop.get('p99'))}, max {num(loop.get('max'))}",
                ),
                ("client CPU", f"{pct(busy, 0)} of a core ({num(client.get('cpu_seconds'))} s)"),
                *_selfcheck_rows(summary),
            ),
            "ll",
        )
    )
    return Section("Client health", tuple(blocks))


def _selfcheck_rows(summary: Summary) -> tuple[tuple[str, str], ...]:
    """The machine's self-check ceiling beside the load this run asked for (a real server's run;
    a simulator run proves its own accuracy in its fidelity section instead)."""
    check = (summary.get("client") or {}).get("selfcheck")
    if check is None:
        if summary.get("fidelity") is not None:
            return ()
        return (
            ("self-check ceiling", "none saved for this machine: `loadgen selfcheck PROFILE` measures it"),
        )
    unit = check.get("unit") or ""
    ceiling = check.get("ceiling")
    limit = "no load passed" if ceiling is None else f"up to {ceiling:g} {unit}"
    verdict = (
        "ABOVE it: client delay may inflate the latencies" if check.get("above_ceiling") else "within it"
    )
    return (
        (
            "self-check ceiling (this machine)",
            f"{limit} on {check.get('workers')} worker(s), first-token lag p99 <= "
            f"{num(check.get('threshold_ms'))} ms (saved {check.get('saved_at')})",
        ),
        ("load asked for", f"{check.get('requested'):g} {unit}: {verdict}"),
    )


def littles_law_section(summary: Summary) -> Section:
    m = summary.get("metrics") or {}
    ll = m.get("littles_law") or {}
    ratio = ll.get("ratio")
    table = Table(
        ("Little's law (L = throughput x latency)", "value"),
        (
            ("dispatch window (first to last send)", f"{num(ll.get('window_seconds'))} s"),
            ("measured mean in flight", num(ll.get("measured_concurrency"))),
            ("completions/s x mean latency", num(ll.get("expected_concurrency"))),
            ("ratio", num(ratio, 3)),
        ),
        "lr",
    )
    if ratio is None:
        verdict = Alert("warning", "Not checked:", "too few requests to check Little's law.")
    elif abs(ratio - 1) <= LITTLE_TOLERANCE:
        verdict = Alert(
            "ok",
            "Consistent:",
            f"within {LITTLE_TOLERANCE:.0%}; the run was in a steady state and its averages describe it.",
        )
    else:
        verdict = Alert(
            "warning",
            "Inconsistent:",
            f"the ratio is more than {LITTLE_TOLERANCE:.0%} "
            "from 1: the run was too short or too unsteady for its averages to describe it.",
        )
    return Section("Little's law", (table, verdict))


def warning_text(w: Mapping[str, Any]) -> str:
    """A client warning's message, with its reasons when it gives them."""
    text = str(w.get("message", ""))
    if w.get("reasons"):
        text += " (" + "; ".join(w["reasons"]) + ")"
    return text
