"""Scraping the target's ``/metrics`` while a run goes on, without disturbing what it measures.

One GET per interval on a connection of its own (a one-connection transport of the run's kind,
so the scrape never takes a slot from a request), on the run's event loop. Parsing is kept off
that loop's busy time: the first scrape, before the load, is parsed in full (engine detection,
configuration labels); during the load a scrape only keeps the lines of the samples it needs
(a prefix test per line, about 0.1 ms for vLLM's ~50 KB, where parsing all of it with
``prometheus_client`` takes ~15 ms, enough to show up as event-loop lag); every kept scrape is
parsed after the load. The last scrape is taken after the load ends (retried for up to a second
until the server's TTFT histogram has counted every request, as its bookkeeping may trail the
stream's end), so histogram deltas cover the whole run.

Results: ``server_metrics.jsonl`` in the run folder (``write_rows``), one line per scrape
(``t_ns`` on loadgen's ``perf_counter_ns`` clock, the midpoint of the GET; ``rtt_ms``; the
normalized row), and the summary's ``server`` block (``server_view``); the engine's labels
(``ServerSeries.labels``) go to ``conditions.server.metrics_labels``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from loadgen.analysis.runs import write_jsonl
from loadgen.backends.transports import TransportOptions, make_transport
from loadgen.backends.transports.base import Transport
from loadgen.clock import every, now_ns
from loadgen.server import metrics as sm
from loadgen.summary import ServerView, Window

SERVER_METRICS = "server_metrics.jsonl"
TRTLLM_PROMETHEUS_PATH = "/prometheus/metrics"
_SETTLE_S, _SETTLE_STEP_S = 1.0, 0.1


@dataclass(slots=True)
class ServerSeries:
    """What the scraper saw: availability (with the reason when not), the engine and format,
    the normalized rows (``t_ns``, ``rtt_ms`` and ``server_metrics.ROW_KEYS``) and the labels."""

    available: bool
    note: str | None = None
    engine: str | None = None
    format: str | None = None  # "prometheus" or "trtllm_json"
    path: str | None = None
    interval_s: float | None = None
    rows: list[dict] = field(default_factory=list)
    failed: int = 0
    labels: dict = field(default_factory=dict)


class ServerMetricsScraper:
    """Scrapes ``path`` every ``interval_s`` between ``start`` and ``stop``."""

    def __init__(self, transport: Transport, path: str, interval_s: float) -> None:
        self._transport = transport
        self._path = path
        self._interval_s = interval_s
        self._series = ServerSeries(available=False, path=path, interval_s=interval_s)
        self._kept: list[tuple[int, int, bytes | dict | None]] = []  # (t_ns, rtt_ns, lines or row)
        self._wanted: tuple[bytes, ...] = ()
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False

    @classmethod
    async def open(cls, config: Any, transport_kind: str, opts: TransportOptions) -> ServerMetricsScraper:
        """A scraper for the profile's ``server_metrics`` section, started (its first scrape
        done) when the section is enabled. ``opts`` are the run's (URL, credentials, TLS); the
        scraper keeps one connection of its own, so a scrape never takes a request's slot."""
        headers = {
            k: v for k, v in opts.headers.items() if k not in ("Content-Type", "Accept", "Accept-Encoding")
        }
        transport = make_transport(
            transport_kind,
            dataclasses.replace(
                opts,
                max_connections=1,
                read_timeout_s=max(5.0, config.interval_s),
                headers={**headers, "Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"},
            ),
        )
        scraper = cls(transport, config.path, config.interval_s)
        scheme = urlsplit(opts.base_url).scheme
        if scheme not in ("http", "https"):
            scraper._series.note = (
                f"target.url is {scheme}://: {config.path} is scraped over HTTP only (Triton "
                "serves its metrics on their own port, 8002 by default)"
            )
        elif config.enabled:
            await scraper.start()
        else:
            scraper._series.note = "server_metrics.enabled is false"
        return scraper

    async def start(self) -> None:
        """Take the first scrape (parsed in full) and, when the server serves metrics loadgen
        knows, start scraping every interval; otherwise leave a note saying why not."""
        got = await self._get(self._path)
        if isinstance(got, str):
            self._series.note = got
            return
        t_ns, rtt_ns, body = got
        s = self._series
        if body.lstrip()[:1] in (b"[", b"{"):
            # trtllm-serve: JSON iteration stats at /metrics, Prometheus text elsewhere.
            other = await self._get(TRTLLM_PROMETHEUS_PATH)
            if isinstance(other, str) or not self._use_prometheus(TRTLLM_PROMETHEUS_PATH, *other):
                s.format, s.engine, s.available = "trtllm_json", "trtllm", True
                s.note = (
                    f"{self._path} serves JSON iteration statistics (trtllm-serve) and "
                    f"{TRTLLM_PROMETHEUS_PATH} no Prometheus text: running, waiting and "
                    "KV-cache usage only, no latency histograms"
                )
                self._kept.append((t_ns, rtt_ns, sm.trtllm_json_row(body)))
        elif not self._use_prometheus(self._path, t_ns, rtt_ns, body):
            return
        self._task = asyncio.create_task(every(self._interval_s, self._stop, self._scrape))

    def _use_prometheus(self, path: str, t_ns: int, rtt_ns: int, body: bytes) -> bool:
        s = self._series
        try:
            samples = sm.parse(body)
        except ValueError as exc:
            s.note = f"GET {path}: not Prometheus text ({exc})"
            return False
        engine = sm.detect_engine(samples)
        if engine is None:
            s.note = f"GET {path}: no vLLM, SGLang or TensorRT-LLM metric names ({len(samples)} samples)"
            return False
        s.available, s.engine, s.format, s.path, s.note = True, engine, "prometheus", path, None
        s.labels = sm.metrics_labels(samples, engine)
        self._path = path
        self._wanted = tuple(n.encode() for n in sm.ENGINES[engine].wanted())
        self._kept.append((t_ns, rtt_ns, sm.normalize(samples, engine)))
        return True

    async def _scrape(self) -> None:
        got = await self._get(self._path)
        if isinstance(got, str):
            self._series.failed += 1
            return
        t_ns, rtt_ns, body = got
        if self._series.format == "trtllm_json":
            self._kept.append((t_ns, rtt_ns, sm.trtllm_json_row(body)))
        else:
            self._kept.append(
                (
                    t_ns,
                    rtt_ns,
                    b"\n".join(line for line in body.split(b"\n") if line.startswith(self._wanted)),
                )
            )

    async def _get(self, path: str) -> tuple[int, int, bytes] | str:
        """(midpoint on loadgen's clock, round trip, body) of a 200, else why not."""
        t_a = now_ns()
        try:
            status, _headers, body = await self._transport.get(path, timeout_s=5.0)
        except Exception as exc:  # noqa: BLE001 - a failed scrape is a note, never a failed run
            cls, msg = self._transport.classify(exc)
            return f"GET {path}: {cls} ({msg})"
        t_b = now_ns()
        if status != 200:
            return f"GET {path}: HTTP {status}"
        return (t_a + t_b) // 2, t_b - t_a, body

    async def stop(self, expected_requests: int | None = None) -> ServerSeries:
        """Stop the interval scrapes, take the last one, close the connection and return the
        series. With ``expected_requests``, the last scrape is retried (up to 1 s) until the
        server's TTFT histogram has grown by that many since the first scrape."""
        s = self._series
        if self._task is not None:
            self._stop.set()
            await self._task
            self._task = None
            deadline = now_ns() + int(_SETTLE_S * 1e9)
            while True:
                n = len(self._kept)
                await self._scrape()
                if (
                    expected_requests is None
                    or len(self._kept) == n
                    or now_ns() >= deadline
                    or self._ttft_growth() >= expected_requests
                ):
                    break
                self._kept.pop()
                await asyncio.sleep(_SETTLE_STEP_S)
        await self.aclose()
        if s.available:
            s.rows = [self._row(t, rtt, kept) for t, rtt, kept in self._kept]
        return s

    def latest(self) -> dict | None:
        """The newest scrape as a normalized row (``t_ns``, ``rtt_ms``, ``ROW_KEYS``: requests
        running and waiting, KV-cache usage, ...), parsed now: a live view asks a few times a
        second, never the load's own path. None before the first scrape or without an engine."""
        if not self._series.available or not self._kept:
            return None
        t_ns, rtt_ns, kept = self._kept[-1]
        return self._row(t_ns, rtt_ns, kept)

    def _ttft_growth(self) -> float:
        first, last = self._kept[0][2], self._kept[-1][2]
        if not isinstance(first, dict) or not isinstance(last, bytes):
            return float("inf")  # nothing to wait for (no histogram, or a failed last scrape)
        engine = self._series.engine
        if engine is None:
            return float("inf")
        now = sm.normalize(sm.parse(last), engine).get("ttft_count")
        then = first.get("ttft_count")
        return float("inf") if now is None or then is None else now - then

    def _row(self, t_ns: int, rtt_ns: int, kept: bytes | dict | None) -> dict:
        engine = self._series.engine
        if isinstance(kept, bytes) and engine is not None:
            kept = sm.normalize(sm.parse(kept), engine)
        elif isinstance(kept, bytes):
            kept = None  # bytes are kept only once an engine was detected
        return {"t_ns": t_ns, "rtt_ms": rtt_ns / 1e6, **(kept or dict.fromkeys(sm.ROW_KEYS))}

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # not BaseException: a Ctrl-C (KeyboardInterrupt) must reach the run
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if not self._closed:
            self._closed = True
            await self._transport.aclose()


def write_rows(run_dir: Path, series: ServerSeries) -> None:
    """``server_metrics.jsonl``: one line per scrape kept, when the server served its metrics."""
    if series.available:
        write_jsonl(Path(run_dir) / SERVER_METRICS, series.rows)


def server_view(series: ServerSeries, window: Window, includes_warmup: bool, records: Any) -> ServerView:
    """The summary's ``server`` block: what was scraped, over the run's measured ``window``, with
    the client's means beside the server's. ``records``: the run's ``RecordTable``, or a
    sequence of its records (``metrics.client_means`` takes either)."""
    block: dict[str, Any] = {
        "available": series.available,
        "note": series.note,
        "engine": series.engine,
        "format": series.format,
        "path": series.path,
        "interval_s": series.interval_s,
    }
    if series.available:
        rows = series.rows
        start, end = window["start_ns"], window["end_ns"]
        span = (start, end) if start is not None and end is not None else None
        rtt = [r["rtt_ms"] for r in rows]
        block.update(
            {
                "file": SERVER_METRICS,
                "scrapes": len(rows),
                "failed_scrapes": series.failed,
                "scrape_rtt_ms": {"mean": sum(rtt) / len(rtt), "max": max(rtt)} if rtt else None,
                "includes_warmup": includes_warmup,
            }
        )
        block.update(sm.summarize(rows, span, sm.client_means(records)))
    return cast(ServerView, block)
