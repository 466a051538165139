"""The report's "Server view": what the server's own metrics said, beside the client's figures.

The plot puts both on one time axis (loadgen's ``perf_counter_ns``, seconds since the first
measured send): requests the server was running and holding in its queue next to the requests
the client had in flight, the KV-cache usage, and the client's send lag next to the server's
queue time. A growing server queue with a punctual client is the server's queueing; a late
client with an empty server queue is the client's own lag. The table sets the server
histograms' means beside the client's means of the same quantities. Runs saved without
server metrics (older runs, targets without ``/metrics``) get a note instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from loadgen.analysis.client_means import COMPARED
from loadgen.analysis.table import RecordTable, as_table
from loadgen.records import RequestRecord
from loadgen.report import telemetry_plot, timeseries
from loadgen.report.blocks import Image, Section, Table, Text, num, pct
from loadgen.server.scraper import SERVER_METRICS  # the scraper's file, named once
from loadgen.summary import ClientVsServer, GaugeStats, ServerView, Summary

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from loadgen.report.plots import Plot

PLOT_NAME = "server_view"
TITLE = "Server view"
Row = Mapping[str, Any]  # one scrape of server_metrics.jsonl: t_ns, rtt_ms and server.metrics.ROW_KEYS
# The means table's rows: (label, client key or None, server histogram): the registry's
# client-vs-server latencies, then what only the server measures.
MEAN_ROWS: tuple[tuple[str, str | None, str], ...] = (
    *((label, key, hist) for key, hist, label in COMPARED),
    ("queue time (server only)", None, "queue_time"),
)


def load_rows(run_dir: str | Path) -> list[Row]:
    """The scrapes of a saved run (``server_metrics.jsonl``), or [] when it has none."""
    path = Path(run_dir) / SERVER_METRICS
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


# A run over target.urls scrapes one replica's /metrics: said before its figures, not after.
SCOPE = (
    "Replica {0} only: loadgen scrapes the first replica's /metrics, so these figures, and the "
    "client's means beside them, are over the requests replica {0} served, not the pool's."
)


def server_section(summary: Summary, plots: Sequence[Image] = ()) -> Section:
    """The server's figures (``view_rows``), llama.cpp's per-response timings, the means beside
    the client's and the server-view plot; a sentence instead when nothing was scraped."""
    server = summary.get("server")
    if not server or not server.get("available"):
        return Section(TITLE, (Text(_absent_text(server)),))
    blocks: list = [Table(("server view", "value"), view_rows(server), "ll")]
    if "replica" in server:
        blocks.insert(0, Text(SCOPE.format(server["replica"])))
    timings = timings_table(summary)
    if timings is not None:
        blocks.append(timings)
    if server.get("note"):
        blocks.append(Text(f"Note: {server.get('note')}."))
    blocks += [means_table(server), Text(_means_text(server)), *plots]
    return Section(TITLE, tuple(blocks))


def _absent_text(server: ServerView | None) -> str:
    if not server:
        return "Not scraped: this run has no server metrics (it was saved by a loadgen without them)."
    return (
        f"No server metrics: {server.get('note') or 'not scraped'}. The report shows the "
        "client's view only (server_metrics.enabled, server_metrics.path in the profile)."
    )


def view_rows(server: ServerView) -> tuple[tuple[str, str], ...]:
    """(what, value): the engine and the scrapes, the gauges, the counters' deltas and, for
    llama.cpp, the engine's own busy time."""
    g = server.get("gauges") or {}
    tokens = server.get("tokens") or {}
    rtt = server.get("scrape_rtt_ms") or {}
    rows: tuple[tuple[str, str], ...] = (
        (
            "engine (from metric names)",
            f"{server.get('engine')} ({server.get('format')}, {server.get('path')})",
        ),
        (
            "scrapes",
            f"{server.get('scrapes')} every {num(server.get('interval_s'))} s, "
            f"{server.get('failed_scrapes', 0)} failed; round trip mean {num(rtt.get('mean'))} ms, "
            f"max {num(rtt.get('max'))} ms",
        ),
        ("requests running (server)", _gauge(g.get("running"), num)),
        ("requests waiting (server queue)", _gauge(g.get("waiting"), num)),
        ("KV-cache usage", _gauge(g.get("kv_cache_usage"), pct)),
        ("preemptions during the run", _int(server.get("preemptions"))),
        (
            "tokens (server counters)",
            f"prompt {_int(tokens.get('prompt'))}, generation {_int(tokens.get('generation'))}",
        ),
    )
    busy = server.get("engine_time")
    if busy:  # llama.cpp's own prompt and generation time
        rows += (
            (
                "engine busy time (server counters)",
                f"prompt {num(busy.get('prompt_s'))} s ({num(busy.get('prompt_ms_per_token'))} ms/token), "
                f"generation {num(busy.get('generation_s'))} s "
                f"({num(busy.get('generation_ms_per_token'))} ms/token), "
                f"{_int(busy.get('decode_calls'))} decode calls",
            ),
        )
    return rows


def _means_text(server: ServerView) -> str:
    return (
        "Server means are the server's histograms over the run (sum delta / count delta between "
        "the scrape before the load and the one after it); client means are over the same "
        "requests (every ok one"
        + (", warm-up included" if server.get("includes_warmup") else "")
        + "). Client minus server is what HTTP, the network and the client add; queueing inside "
        "the server is in both, and the queue-time row says how much of it there was. Gauges: "
        "mean and max over the scrapes inside the measured window."
    )


def timings_table(summary: Summary) -> Table | None:
    """llama.cpp's per-response timings beside the client's TTFT and TPOT, request by request."""
    t = (summary.get("metrics") or {}).get("server_timings")
    if not t:
        return None
    rows = []
    for pair, label in (
        (t.get("ttft"), "TTFT vs prompt_ms"),
        (t.get("tpot"), "TPOT vs predicted_ms / predicted_n"),
    ):
        if pair:
            rows.append(
                (
                    label,
                    str(pair["requests"]),
                    num(pair["client_mean_ms"]),
                    num(pair["server_mean_ms"]),
                    num(pair["difference_ms"]),
                )
            )
    header = ("each response's own timings (ms)", "requests", "client mean", "server mean", "client - server")
    return Table(header, tuple(rows), "lrrrr")


def means_table(server: ServerView) -> Table:
    hists = server.get("histograms") or {}
    cmp = server.get("client_vs_server") or {}
    rows = []
    for label, client_key, hist in MEAN_ROWS:
        h = hists.get(hist)
        if h is None:
            continue
        c: ClientVsServer = (cmp.get(client_key) or {}) if client_key else {}
        rows.append(
            (
                label,
                _int(h.get("count")),
                num(h.get("mean_ms")),
                num(c.get("client_mean_ms")),
                num(c.get("difference_ms")),
            )
        )
    return Table(("mean (ms)", "server n", "server", "client", "client - server"), tuple(rows), "lrrrr")


def server_plot(
    summary: Summary,
    records: RecordTable | Sequence[RequestRecord],
    rows: Sequence[Row],
    gpu_rows: Sequence[Row] = (),
) -> Plot | None:
    """The server-view figure, or None without scrapes: three panels on one time axis
    (requests, KV cache with the GPUs' memory beside it when they were read, lag), every side
    on loadgen's clock, each stage's start marked."""
    server = summary.get("server")
    if not rows or not server or not server.get("available"):
        return None
    from loadgen.report import plots as P

    table = as_table(records)
    win = timeseries.window_ns(table)
    t0 = win[0] if win else rows[0]["t_ns"]
    t_ns = np.array([r["t_ns"] for r in rows], np.int64)
    x = (t_ns - t0) / 1e9
    fig = P.Figure(figsize=(9.0, 6.4), dpi=P.DPI, layout="constrained")
    P.FigureCanvasAgg(fig)
    ax_req, ax_kv, ax_lag = fig.subplots(3, 1, sharex=True)
    _requests_panel(ax_req, x, rows, _in_flight(table, t_ns))
    _kv_panel(ax_kv, x, rows)
    telemetry_plot.memory_overlay(ax_kv, gpu_rows, t0)
    _lag_panel(ax_lag, x, rows, table, t0)
    ax_req.set_title(f"Server view ({server.get('engine')}) beside the client's")
    for ax in (ax_req, ax_kv, ax_lag):
        ax.grid(True, color="#eeeeee")
        ax.set_ylim(bottom=0)
        telemetry_plot.mark_stages(ax, t0, summary)
    return P.Plot(
        PLOT_NAME,
        "Server view beside the client's",
        "Scraped every interval from the server's /metrics: requests it was running and "
        "queueing (solid) against the requests the client had in flight (dashed), its "
        "KV-cache usage (with the GPUs' memory used, when they were read), and its queue time "
        "against the client's send lag; dashed grey lines mark each stage's start. A growing "
        "server queue is queueing in the server; send lag with an empty queue is the client.",
        P._png(fig),
    )


def _requests_panel(ax: Axes, x: np.ndarray, rows: Sequence[Row], in_flight: np.ndarray) -> None:
    """The server's running and waiting requests (steps at each scrape), the client's in flight."""
    from loadgen.report import plots as P

    for key, label, colour in (
        ("running", "server: running", P._OK),
        ("waiting", "server: waiting (queued)", P._FAIL),
    ):
        y = _column(rows, key)
        if not np.isnan(y).all():
            ax.step(x, y, where="post", color=colour, lw=1.5, label=label)
    ax.step(x, in_flight, where="post", color="#2ca02c", lw=1.2, ls="--", label="client: in flight")
    ax.set_ylabel("requests")
    P.legend(ax, loc="upper right", fontsize=8)


def _kv_panel(ax: Axes, x: np.ndarray, rows: Sequence[Row]) -> None:
    from loadgen.report import plots as P

    kv = _column(rows, "kv_cache_usage") * 100
    if np.isnan(kv).all():
        P._no_data(ax)
    else:
        ax.step(x, kv, where="post", color="#9467bd", lw=1.5)
    ax.set_ylabel("KV cache used (%)")


def _lag_panel(ax: Axes, x: np.ndarray, rows: Sequence[Row], table: RecordTable, t0: int) -> None:
    """Each measured request's send lag at its send, and the server's queue time per scrape."""
    from loadgen.report import plots as P

    measured = ~table.column("warmup")
    send, sched = table.column("t_send_ns")[measured], table.column("t_sched_ns")[measured]
    if len(send):
        lx, ly = (send - t0) / 1e9, (send - sched) / 1e6
        ax.scatter(lx, ly, s=8, color=P._LINE, label="client: send lag per request")
    queue = _interval_means(rows, "queue_time")
    keep = ~np.isnan(queue)
    if keep.any():
        label = "server: mean queue time of requests counted since the last scrape"
        ax.plot(x[keep], queue[keep], "o-", color=P._FAIL, lw=1.2, ms=3, label=label)
    ax.set_ylabel("ms")
    P.legend(ax, loc="upper right", fontsize=8)
    ax.set_xlabel("time (s since first measured send; both sides on loadgen's clock)")


def _column(rows: Sequence[Row], key: str) -> np.ndarray:
    return np.array([np.nan if r.get(key) is None else r[key] for r in rows], np.float64)


def _in_flight(table: RecordTable, t_ns: np.ndarray) -> np.ndarray:
    """Requests (warm-up included: the server sees them too) sent and not yet ended at each t:
    those sent by t minus those also ended by t (an end before its send is taken as the send,
    which never counts, as before), two binary searches rather than a requests x scrapes grid."""
    send = table.column("t_send_ns")
    end, has_end = table.ints("t_end_ns")
    end = np.maximum(np.where(has_end, end, send), send)
    sent = np.searchsorted(np.sort(send), t_ns, side="right")
    ended = np.searchsorted(np.sort(end), t_ns, side="right")
    return (sent - ended).astype(float)


def _interval_means(rows: Sequence[Row], hist: str) -> np.ndarray:
    """Per scrape, the mean (ms) of the observations the histogram gained since the previous one."""
    s, c = _column(rows, f"{hist}_sum_s"), _column(rows, f"{hist}_count")
    out = np.full(len(rows), np.nan)
    if len(rows) > 1:
        ds, dc = np.diff(s), np.diff(c)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[1:] = np.where(dc > 0, ds / dc * 1e3, np.nan)
    return out


def _gauge(g: GaugeStats | None, fmt: Callable[[Any], str]) -> str:
    return (
        "-" if not g else f"mean {fmt(g.get('mean'))}, max {fmt(g.get('max'))} ({g.get('samples')} scrapes)"
    )


def _int(v: object) -> str:
    return "-" if v is None else f"{v:,.0f}"
