"""The live dashboard (``--ui dashboard``, the default on a terminal): the stage and its
progress, TTFT / TPOT / ITL p50 and p99 over the last seconds and for the stage so far, tokens/s
and requests/s, in flight against the load asked for, errors by class, the server's own view
(requests running and waiting, KV-cache usage, from its ``/metrics``), the client's health (its
event loop's lag, its CPU, the machine's self-check ceiling) and a small TTFT histogram.

It reads ``live.stats.LiveStats`` snapshots, computed when it redraws (twice a second), never
on the path that measures: the cost is one call per finished record, measured in the note of
the change that added it. Same interface as ``console.ProgressView``: ``note``, ``update``.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from loadgen.live.stats import LiveStats, Snapshot

__all__ = ["Dashboard", "render"]

_REDRAW_S = 0.5
_TICK_S = 0.25  # the run's progress ticker (runner.execute._PROGRESS_EVERY_S): its lateness is loop lag
_BLOCKS = " ▁▂▃▄▅▆▇█"


def _ms(v: float | None) -> str:
    return "-" if v is None else (f"{v:,.1f}" if v < 1000 else f"{v:,.0f}")


def _latency(snap: Snapshot) -> Table:
    t = Table(
        title=f"latency, ms (last {snap.window_s:g} s | stage so far)", title_justify="left", expand=False
    )
    t.add_column("")
    for col in ("p50", "p99", "p50 stage", "p99 stage"):
        t.add_column(col, justify="right")
    for name, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL")):
        w, s = snap.window[name], snap.stage_so_far[name]
        t.add_row(label, _ms(w["p50"]), _ms(w["p99"]), _ms(s["p50"]), _ms(s["p99"]))
    return t


def _histogram(snap: Snapshot) -> Text:
    bars = snap.histogram
    if not bars:
        return Text("TTFT histogram: no requests yet", style="dim")
    top = max(c for _, c in bars) or 1
    cells = "".join(_BLOCKS[round(c / top * (len(_BLOCKS) - 1))] for _, c in bars)
    lo, hi = _ms(bars[0][0]), _ms(bars[-1][0])
    return Text.assemble(("TTFT this stage  ", "bold"), f"≤{lo} ms ", (cells, "cyan"), f" ≤{hi} ms")


def render(
    snap: Snapshot,
    context: dict[str, Any],
    progress: Any,
    server: dict | None,
    health: dict[str, float | None],
    title: str = "loadgen",
) -> Group:
    """The dashboard for one moment (a rich renderable; tests render it to text)."""
    live = progress.live if progress is not None else None
    load = context.get("load") or {}
    target = load.get("concurrency") or load.get("max_concurrency")
    asked = (
        f"c={load['concurrency']}"
        if load.get("concurrency")
        else (f"{load['rate']:g} req/s" if load.get("rate") else "")
    )
    stages = context.get("stages") or 1
    stage = f"stage {int(context.get('stage', 0)) + 1}/{stages} {context.get('stage_name') or asked}"
    total = "" if progress is None or progress.total is None else f"/{progress.total}"
    head = Text.assemble(
        (f"{title}  ", "bold"),
        f"{stage}  ·  {snap.elapsed_s:,.0f} s  ·  {snap.done}{total} requests",
    )
    in_flight = "-" if live is None else str(live.in_flight)
    rates = Text(
        f"output {snap.output_tokens_per_s:,.0f} tok/s   requests {snap.requests_per_s:,.2f}/s   "
        f"in flight {in_flight}"
        + (f" of {target}" if target else "")
        + (f"   asked {asked}" if asked else "")
    )
    errors = (
        Text("errors  " + "  ".join(f"{k} {v}" for k, v in sorted(snap.errors.items())), style="red")
        if snap.errors
        else Text("errors  none", style="green")
    )
    if server:
        kv = server.get("kv_cache_usage")
        srv = Text(
            f"server  running {_n(server.get('running'))}   waiting {_n(server.get('waiting'))}   "
            f"KV cache {'-' if kv is None else f'{kv * 100:.0f} %'}"
        )
    else:
        srv = Text("server  no /metrics view", style="dim")
    check = context.get("selfcheck") or {}
    ceiling = check.get("ceiling")
    lag, cpu = health.get("loop_lag_ms"), health.get("cpu_percent")
    client = Text(
        f"client  loop lag {_ms(lag)} ms   CPU {'-' if cpu is None else f'{cpu:.0f} %'}"
        + (f"   self-check ceiling {ceiling:g} {check.get('unit', '')}" if ceiling is not None else ""),
        style="yellow" if check.get("above_ceiling") else "",
    )
    return Group(head, _latency(snap), rates, errors, srv, client, _histogram(snap))


def _n(v: object) -> str:
    return "-" if v is None else f"{v:,.0f}"


class Dashboard:
    """The live view over a run (a rich ``Live`` on stderr), fed by the run's progress ticker."""

    def __init__(self, stats: LiveStats, title: str, console: Console | None = None) -> None:
        self.stats = stats
        self.title = title
        self.console = console or Console(stderr=True)
        self._live: Live | None = None
        self._last_draw = 0.0
        self._last_tick: float | None = None
        self._cpu0 = (time.process_time(), time.perf_counter())
        self._lag_ms: float | None = None

    def __enter__(self) -> Dashboard:
        self._live = Live(console=self.console, auto_refresh=False, transient=False)
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def note(self, msg: str) -> None:
        self.console.print(f"[dim]{msg}[/dim]")

    def update(self, progress: Any) -> None:
        now = time.perf_counter()
        if self._last_tick is not None:  # the ticker sleeps _TICK_S: what it overslept is the loop's lag
            self._lag_ms = max(0.0, (now - self._last_tick - _TICK_S) * 1e3)
        self._last_tick = now
        if self._live is None or now - self._last_draw < _REDRAW_S:
            return
        cpu0, wall0 = self._cpu0
        cpu = time.process_time()
        health = {"loop_lag_ms": self._lag_ms, "cpu_percent": (cpu - cpu0) / max(now - wall0, 1e-9) * 100}
        self._cpu0, self._last_draw = (cpu, now), now
        snap = self.stats.snapshot()
        view = render(snap, self.stats.context, progress, self.stats.server_row(), health, self.title)
        self._live.update(view, refresh=True)
