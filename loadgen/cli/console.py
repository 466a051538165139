"""Console rendering for the CLI: the live progress bar and the end-of-run table.

Part of the CLI layer (only cli.py uses it); the library itself never prints.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from loadgen import metric_defs
from loadgen.analysis.saturation import queue_word
from loadgen.cli import block_lines
from loadgen.cli.block_lines import fidelity_line
from loadgen.report.agentic import agentic_lines
from loadgen.report.conditions import load_shape
from loadgen.report.repeats import repeats_table
from loadgen.summary import Curve, SlaBlock, Summary

if TYPE_CHECKING:  # the runner and the result are imported only when a run has ended
    from loadgen.result import RunResult
    from loadgen.runner.execute import Progress as RunProgress

# The latency table: the registry's distributions shown on the console, and its columns. A row
# with a ``same_as`` (TTFT and E2E from the scheduled send) is left out while it matches that
# one, as in a closed loop: the console is narrow, and the same figures twice tell nothing.
_ROWS = tuple(d for d in metric_defs.DISTRIBUTIONS if d.console)
_COLS = metric_defs.CONSOLE_STATS


class ProgressView:
    """done / in-flight / errors / current tokens/s, refreshed from the run's ticker."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.console = Console(stderr=True)
        self._progress: Progress | None = None
        self._task: Any = None
        self._last = (0.0, 0)

    def __enter__(self) -> ProgressView:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=self.console,
                refresh_per_second=4,
                transient=False,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def note(self, msg: str) -> None:
        self.console.print(f"[dim]{msg}[/dim]")

    def update(self, p: RunProgress) -> None:
        if self._progress is None:
            return
        live = p.live
        t_prev, tok_prev = self._last
        dt = p.elapsed_s - t_prev
        rate = (live.tokens - tok_prev) / dt if dt > 0 else 0.0
        if dt >= 1.0 or t_prev == 0.0:
            self._last = (p.elapsed_s, live.tokens)
            self._rate = rate
        stats = f"in-flight {live.in_flight}  errors {live.errors}  {getattr(self, '_rate', 0.0):,.0f} tok/s"
        total = p.total if p.total is not None else None
        if self._task is None:
            self._task = self._progress.add_task("requests", total=total, stats=stats)
        self._progress.update(self._task, completed=live.done, stats=stats, total=total)


def _fmt(v: object, digits: int = 1) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def summary_table(summary: Summary) -> Table:
    failed = (summary.get("counts") or {}).get("failed") or 0
    title = "latency (ms)" if not failed else f"latency (ms) of the ok requests only ({failed} failed)"
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("metric")
    t.add_column("n", justify="right")
    for c in _COLS:
        t.add_column(c.replace("_", "."), justify="right")
    for row in _ROWS:
        d = metric_defs.lookup(summary, row.name) or {}
        if not d.get("count") or not metric_defs.table_shows(summary, row):
            continue
        t.add_row(row.label, str(d["count"]), *(_fmt(d.get(c), row.digits) for c in _COLS))
    return t


def stage_table(summary: Summary) -> Table:
    """One row per stage of a multi-stage run: its load, throughput, latency tails and verdict."""
    t = Table(title="stages", title_justify="left", show_edge=False, pad_edge=False)
    for col in (
        "stage",
        "sent",
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p99",
        "goodput",
        "SLA",
        "steady",
        "queue",
    ):
        t.add_column(col, justify="left" if col in ("stage", "SLA", "steady", "queue") else "right")
    for st in summary["stages"]:
        m = st["metrics"]
        t.add_row(
            st["name"],
            str(st["counts"]["sent"]),
            _fmt(m.get("request_throughput_rps"), 2),
            _fmt(m.get("output_tokens_per_s"), 0),
            _fmt(m["ttft_ms"].get("p50")),
            _fmt(m["ttft_ms"].get("p99")),
            _fmt(m["tpot_ms"].get("p99"), 2),
            _fmt((m.get("goodput") or {}).get("requests_per_s"), 2),
            "none: all warm-up" if st["sla"].get("no_verdict") else st["sla"]["verdict"],
            "yes" if st["steady_state"]["steady"] else "no",
            _queue(sat["verdict"] if (sat := st.get("saturation")) else None),
        )
    return t


def _queue(verdict: str | None) -> str:
    """The stage table's queue column (analysis/saturation.py's words), a growing queue in red."""
    word = queue_word(verdict)
    return f"[red]{word}[/red]" if verdict == "over_saturated" else word


def _print_curve(con: Console, curve: Curve) -> None:
    knee = curve.get("knee")
    con.print(
        "knee    "
        + (
            f"{knee['name']} ({_fmt(knee['throughput_rps'], 2)} req/s): past it, more load "
            f"buys less than half as much throughput"
            if knee
            else "none: no stage had an ok request"
            if curve.get("stages_with_ok") == 0
            else "none: throughput kept scaling with the load"
        )
    )
    last = curve.get("last_stage_meeting_sla")
    names = {p["stage"]: p["name"] for p in curve["points"]}
    con.print(
        "SLA     " + (f"last stage meeting it: {names[last]}" if last is not None else "no stage met it")
    )


def _scalar(summary: Summary, name: str) -> str:
    """A run scalar of the registry at its console precision."""
    return _fmt(metric_defs.lookup(summary, name), metric_defs.get(name).digits)


def print_summary(result: RunResult, file: TextIO | None = None) -> None:
    """The end-of-run summary, entry after entry of ``CONSOLE``: what ran, what was counted, the
    latency table (and a sweep's stages), the rates, the SLA, the traffic, the client's own
    health. A block's entry prints only when the summary has that block."""
    s = result.summary
    con = Console(file=file or sys.stdout, width=110)
    for name, show in CONSOLE:
        if name in CORE or name in s:
            show(con, s)
    con.print(
        f"results  {result.run_dir}/  ({', '.join(sorted(p.name for p in result.run_dir.iterdir()))})",
        soft_wrap=True,
    )


def _lines(make: Callable[[Summary], list[str]]) -> Callable[[Console, Summary], None]:
    def show(con: Console, s: Summary) -> None:
        for line in make(s):
            con.print(line, soft_wrap=True)

    return show


def _print_stages(con: Console, s: Summary) -> None:
    con.print(stage_table(s))
    if "curve" in s:
        _print_curve(con, s["curve"])


def _print_fidelity(con: Console, s: Summary) -> None:
    fid = s["fidelity"]
    colour = {"pass": "green", "fail": "red"}.get(fid["verdict"], "yellow")
    con.print(f"[{colour}]{fidelity_line(fid)}[/{colour}]", soft_wrap=True)
    busy = s["client"].get("busy_machine")
    if fid["verdict"] == "fail" and busy:  # why the client trailed the server's log
        con.print(f"[yellow]why[/yellow]     {busy}", soft_wrap=True)


def _print_header(con: Console, s: Summary) -> None:
    """The run, whether it is complete, its target, its load and what ended it."""
    tgt = s["conditions"]["target"]
    con.print(
        f"[bold]run {s['run_id']}[/bold]"
        + ("" if s.get("complete", True) else f"  [yellow]INCOMPLETE: {s.get('incomplete_reason')}[/yellow]")
    )
    con.print(f"target  {tgt['url']}  model={tgt['model']}  endpoint={tgt['endpoint']}", soft_wrap=True)
    con.print(f"load    {load_shape(s)}")
    server = s["conditions"].get("server")
    preflight = server.get("preflight") if server else None
    note = preflight["note"] if preflight else None
    if note:
        con.print(f"[yellow]note[/yellow]    {note}", soft_wrap=True)
    if s.get("ended_by"):
        con.print(f"ended   {s['ended_by']['text']}")


def error_lines(c: Mapping[str, Any]) -> list[str]:
    """One line an error class with its share of the sent requests, the server's own message
    and, for a known refusal, the fix (the ``counts`` block's ``error_samples``)."""
    sent = c.get("sent") or 0
    samples = c.get("error_samples") or {}
    out = []
    for cls, n in (c.get("errors_by_class") or {}).items():
        sample = samples.get(cls)
        if not sample:
            continue
        share = f"{100 * n / sent:.0f} %" if sent else "-"
        line = f"  {cls} {n} ({share}): {sample.get('message') or '(no message)'}"
        if sample.get("hint"):
            line += f"\n    fix: {sample['hint']}"
        out.append(line)
    return out


def _print_counts(con: Console, s: Summary) -> None:
    """The requests counted, their errors, and what the server or the connection did unusually."""
    c = s["counts"]
    con.print(
        f"requests  sent {c['sent']}  ok {c['ok']}  failed {c['failed']}  cancelled {c['cancelled']}"
        f"  warm-up {c.get('warmup', 0)}  window {_fmt(s['window']['seconds'], 2)} s"
    )
    if c.get("errors_by_class"):
        con.print("errors   " + "  ".join(f"{k}: {v}" for k, v in c["errors_by_class"].items()))
        for line in error_lines(c):
            con.print(line, soft_wrap=True, markup=False, highlight=False)
    unmarked = ends.get("no_terminator") if (ends := c.get("stream_ends")) else None
    if unmarked:
        con.print(
            f"[yellow]stream end[/yellow] {unmarked} ok stream(s) closed after their finish without "
            "data: [DONE] (accepted; target.require_done: true fails them)"
        )
    zero = (c.get("anomalies") or {}).get("zero_output_tokens")
    if zero:
        con.print(f"[yellow]anomaly[/yellow]  {zero} ok request(s) streamed no output token at all")
    resent = (c.get("retries") or {}).get("requests")
    if resent:
        con.print(
            f"[yellow]re-sent[/yellow]  {resent} request(s) went out again on a fresh connection: the "
            "reused one closed before any byte of the answer"
        )
    backoff = c.get("retry_after") or {}
    if backoff.get("requests"):
        con.print(
            f"[yellow]back-off[/yellow] {backoff['requests']} response(s) asked the client to retry "
            f"later (Retry-After, up to {backoff['max_s']:g} s)"
        )


def _print_rates(con: Console, s: Summary) -> None:
    """Throughput, goodput against the per-request SLOs, and the Little's-law check; the rates
    the summary has (a run without a token stream has items/s, not output tokens/s)."""
    streamed = metric_defs.present(s, "output_tokens_per_s")
    volume = (
        f"output {_scalar(s, 'output_tokens_per_s')} tok/s   total {_scalar(s, 'total_tokens_per_s')} tok/s"
        if streamed
        else f"items {_scalar(s, 'items_per_s')}/s"
    )
    con.print(
        f"throughput  {_scalar(s, 'request_throughput_rps')} req/s   "
        f"input {_scalar(s, 'input_tokens_per_s')} tok/s   {volume}"
    )
    slos = (s.get("sla") or {}).get("slos") or {}
    slo_txt = ", ".join(f"{k} <= {v:g}" for k, v in slos.items()) or "no per-request SLO set"
    frac = metric_defs.lookup(s, "goodput_attained_fraction")
    frac_digits = metric_defs.get("goodput_attained_fraction").digits
    good_tokens = f"{_scalar(s, 'goodput_output_tokens_per_s')} output tok/s   " if streamed else ""
    con.print(
        f"goodput     {_scalar(s, 'goodput_rps')} req/s   {good_tokens}"
        f"{'-' if frac is None else f'{frac:.{frac_digits}%}'} of requests met {slo_txt}"
    )
    ll = s["metrics"].get("littles_law") or {}
    con.print(
        f"in flight   mean {_scalar(s, 'mean_concurrency')} over the window;  Little's law "
        f"while sending: measured {_fmt(ll.get('measured_concurrency'), 2)} vs "
        f"throughput x latency {_fmt(ll.get('expected_concurrency'), 2)} (ratio {_fmt(ll.get('ratio'), 3)})"
    )


def _print_energy(con: Console, s: Summary) -> None:
    """The GPUs' energy per token and mean power over the measured window."""
    streamed = metric_defs.present(s, "output_tokens_per_s")
    energy = s["telemetry"].get("energy")
    if energy:
        gpus = energy["gpus"]
        # A pooling run (embeddings, rerank) has no output token to divide by: its energy is per
        # input token, the work it did.
        per_token = (
            f"{_scalar(s, 'energy_per_output_token_j')} J/output token   "
            f"{_scalar(s, 'output_tokens_per_joule')} output tok/J   "
            if streamed
            else f"{_scalar(s, 'energy_per_token_j')} J/input token   "
        )
        con.print(
            f"energy      {per_token}"
            f"{_scalar(s, 'gpu_power_w')} W mean over {gpus} GPU{'' if gpus == 1 else 's'} "
            f"(energy counter, {'complete' if energy['complete'] else 'see the notes'})"
        )


def _print_repeats(con: Console, s: Summary) -> None:
    """A repeated run's headline figures, repeat by repeat, with their between-repeat interval."""
    table = repeats_table(s)
    if table is None:
        return
    block = s["repeats"]
    t = Table(
        title=f"over {block['completed']} of {block['count']} repeats (same seed, same schedule; "
        f"interval: Student t over the repeats)",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    for i, col in enumerate(table.header):
        t.add_column(col, justify="left" if i == 0 else "right")
    for row in table.rows:
        t.add_row(*row)
    con.print(t)


def _print_sla(con: Console, sla: SlaBlock) -> None:
    """The SLA verdict with the first failing rule, then every rule (nothing when none is set)."""
    if sla.get("verdict") == "none":
        return
    colour = {"pass": "green", "incomplete": "yellow"}.get(sla["verdict"], "red")
    first = next((d for d in sla.get("details", []) if not d["passed"]), None)
    why = f": {first['reason'] or first['rule']}" if first is not None else ""
    con.print(f"SLA [{colour}]{sla['verdict'].upper()}[/{colour}]{why}")
    for d in sla.get("details", []):
        mark = "[green]ok[/green]  " if d["passed"] else "[red]FAIL[/red]"
        val = "no data" if d.get("value") is None else f"{d['value']:.4g}"
        con.print(f"  {mark} {d['rule']}  (measured {val})" + (f" {d['reason']}" if d.get("reason") else ""))


def _print_client(con: Console, s: Summary) -> None:
    """The client's own health: its CPU and loop lag (its warnings follow the fidelity check)."""
    client = s.get("client") or {}
    con.print(
        f"client  cpu {client.get('cpu_busy_fraction', 0):.0%} of a core   event-loop lag p99 "
        f"{_fmt((client.get('event_loop_lag_ms') or {}).get('p99'), 2)} ms"
    )
    busy = client.get("busy_machine")
    fid = s.get("fidelity")
    failed = fid is not None and fid["verdict"] == "fail"
    if busy and not failed:  # a failed fidelity check says it as its why, next
        con.print(f"[yellow]machine[/yellow] {busy}", soft_wrap=True)


def _print_warnings(con: Console, s: Summary) -> None:
    """The client's warnings, and whether the prompt lengths are approximate."""
    client = s.get("client") or {}
    for w in client.get("warnings", []):
        con.print(
            f"[yellow]warning[/yellow] {w['warning']}: {w['message']}"
            + (f" ({'; '.join(w['reasons'])})" if w.get("reasons") else "")
        )
    if s["conditions"].get("prompt_lengths_approximate"):
        con.print(
            "[dim]prompt lengths are approximate (no tokenizer); server-reported prompt tokens "
            "are used where given[/dim]"
        )


# The blocks that add a line or two each to a run's table (production-like traffic, the media
# sent, speculative decoding, the server's prefix-cache hit rate), in the console's order.
LINES: dict[str, Callable[[Summary], list[str]]] = {
    "quality": block_lines.quality_lines,
    "sessions": block_lines.sessions_lines,
    "agentic": agentic_lines,
    "models": block_lines.models_lines,
    "replicas": block_lines.replicas_lines,
    "media": block_lines.media_lines,
    "http_phases": block_lines.http_phases_lines,
    "speculative": block_lines.speculative_lines,
    "server": block_lines.server_lines,
}


def traffic_lines(summary: Summary) -> list[str]:
    """The lines ``LINES``' blocks print for ``summary``, in order."""
    return [line for name, make in LINES.items() if name in summary for line in make(summary)]


# The console, in order: the core entries (always printed) and, by the names of the summary's
# blocks (runner/blocks.py), each block's lines, printed when the summary has it.
CONSOLE: tuple[tuple[str, Callable[[Console, Summary], None]], ...] = (
    ("header", _print_header),
    ("counts", _print_counts),
    ("latency", lambda con, s: con.print(summary_table(s))),
    ("stages", _print_stages),
    ("rates", _print_rates),
    ("telemetry", _print_energy),
    ("repeats", _print_repeats),
    ("sla", lambda con, s: _print_sla(con, s.get("sla") or {})),
    *((name, _lines(make)) for name, make in LINES.items()),
    ("client", _print_client),
    ("fidelity", _print_fidelity),
    ("client_warnings", _print_warnings),
)
CORE = frozenset({"header", "counts", "latency", "rates", "sla", "client", "client_warnings"})
# Blocks the run's console leaves to another place, and where they are.
NOT_SHOWN: dict[str, str] = {
    "curve": "with the stages' table (its knee and last stage meeting the SLA)",
    "capacity": "printed by `loadgen capacity` (cli/capacity.py), not by a run",
    "precision": "in the `ended` line (ended_by's text)",
}
