"""Reading the GPUs while a run goes on: DCGM exporters over HTTP and this machine's NVML.

Each source is read every ``interval_s`` on deadlines of the run's clock (``now_ns``), as the
server's ``/metrics`` scraper reads the server (``scraper.py``): a DCGM exporter on one
connection of its own (never a request's slot), its first scrape parsed in full (to say at once
when the URL serves no DCGM fields), later ones keeping only the lines of the fields read (a
prefix test per line) and parsed after the load. One last reading of every source is taken
after the load, so the measured window ends inside the readings. NVML is read in a thread.

A source that cannot be read (refused, not DCGM text, no library, no GPU) is a note in the
summary, never a failed run. Results: ``telemetry.jsonl`` (``write_rows``: one line per GPU per
reading, ``t_ns`` the midpoint of the GET on loadgen's clock) and the rows for
``telemetry.telemetry_block``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loadgen.analysis.runs import write_jsonl
from loadgen.backends.transports import TransportOptions, make_transport
from loadgen.clock import every, now_ns
from loadgen.redact import redact_url
from loadgen.server import dcgm
from loadgen.server.nvml import NvmlReader

TELEMETRY = "telemetry.jsonl"
NO_SOURCES = "no telemetry sources configured"
SIM_PATH = "/dcgm/metrics"  # the built-in simulator's exporter (sim/gpu.py)


@dataclass(slots=True)
class Source:
    """One place the GPUs are read: its kind ("dcgm", "simulator", "nvml"), its URL (redacted),
    readings taken and failed, and why it gave nothing when it did not."""

    kind: str
    url: str | None
    readings: int = 0
    failed: int = 0
    note: str | None = None


@dataclass(slots=True)
class TelemetrySeries:
    """What the readers saw: the sources and every GPU row (``t_ns``, ``source`` and
    ``dcgm.ID_KEYS`` / ``ROW_KEYS``). ``note`` is ``NO_SOURCES`` when nothing was asked."""

    sources: list[Source]
    interval_s: float
    rows: list[dict] = field(default_factory=list)
    note: str | None = None

    @property
    def available(self) -> bool:
        return bool(self.rows)


class _Reader:
    """One source's reads: ``first()`` (full parse) and ``take()`` (kept for after the load)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.kept: list[tuple[int, bytes | list[dict]]] = []
        self.live = False

    async def first(self) -> None: ...

    async def take(self) -> None: ...

    def rows(self) -> list[dict]:
        out = []
        for t_ns, kept in self.kept:
            gpus = dcgm.gpu_rows(kept) if isinstance(kept, bytes) else kept
            out += [{"t_ns": t_ns, "source": self.source.url or self.source.kind, **g} for g in gpus]
        return out

    async def aclose(self) -> None: ...


class _DcgmReader(_Reader):
    def __init__(self, source: Source, url: str, transport_kind: str) -> None:
        super().__init__(source)
        parts = urlsplit(url)
        self._path = urlunsplit(("", "", parts.path or "/", parts.query, ""))
        opts = TransportOptions(
            base_url=f"{parts.scheme}://{parts.netloc}",
            headers={"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"},
            max_connections=1,
            connect_timeout_s=5.0,
            read_timeout_s=5.0,
        )
        self._transport = make_transport(transport_kind, opts)

    async def _get(self) -> tuple[int, bytes] | str:
        t_a = now_ns()
        try:
            status, _headers, body = await self._transport.get(self._path, timeout_s=5.0)
        except Exception as exc:  # noqa: BLE001 - a failed scrape is a note, never a failed run
            cls, msg = self._transport.classify(exc)
            return f"GET {self.source.url}: {cls} ({msg})"
        if status != 200:
            return f"GET {self.source.url}: HTTP {status}"
        return (t_a + now_ns()) // 2, body

    async def first(self) -> None:
        got = await self._get()
        if isinstance(got, str):
            self.source.note = got
            return
        try:
            gpus = dcgm.gpu_rows(got[1])
        except ValueError as exc:
            self.source.note = f"GET {self.source.url}: not Prometheus text ({exc})"
            return
        if not gpus:
            self.source.note = f"GET {self.source.url}: no DCGM_FI_DEV_* fields (is it a DCGM exporter?)"
            return
        self.live = True
        self.kept.append((got[0], gpus))
        self.source.readings += 1

    async def take(self) -> None:
        got = await self._get()
        if isinstance(got, str):
            self.source.failed += 1
            self.source.note = got  # the last failure, said beside the count
            return
        body = b"\n".join(line for line in got[1].split(b"\n") if line.startswith(dcgm.WANTED))
        self.kept.append((got[0], body))
        self.source.readings += 1

    async def aclose(self) -> None:
        await self._transport.aclose()


class _NvmlReader(_Reader):
    def __init__(self, source: Source) -> None:
        super().__init__(source)
        self._nvml: NvmlReader | None = None

    async def first(self) -> None:
        got = await asyncio.to_thread(NvmlReader.open)
        if isinstance(got, str):
            self.source.note = got
            return
        self._nvml, self.live = got, True
        await self.take()

    async def take(self) -> None:
        assert self._nvml is not None  # live only once opened
        t_a = now_ns()
        gpus = await asyncio.to_thread(self._nvml.read)
        self.kept.append(((t_a + now_ns()) // 2, gpus))
        self.source.readings += 1

    async def aclose(self) -> None:
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None


class TelemetryScraper:
    """Reads every configured source every ``interval_s`` between ``open`` and ``stop``."""

    def __init__(self, readers: list[_Reader], interval_s: float) -> None:
        self._readers = readers
        self._interval_s = interval_s
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._closed = False

    @classmethod
    async def open(cls, config: Any, sim_url: str | None, transport_kind: str) -> TelemetryScraper:
        """The profile's ``telemetry`` section's sources (and the built-in simulator's exporter
        when ``sim_url`` is its address and ``telemetry.simulator`` is on), each read once."""
        readers: list[_Reader] = []
        urls = [("dcgm", u) for u in config.dcgm]
        if sim_url is not None and config.simulator:
            urls.insert(0, ("simulator", sim_url.rstrip("/") + SIM_PATH))
        for kind, url in urls:
            readers.append(_DcgmReader(Source(kind, redact_url(url)), url, transport_kind))
        if config.nvml:
            readers.append(_NvmlReader(Source("nvml", None)))
        scraper = cls(readers, config.interval_s)
        await asyncio.gather(*(r.first() for r in readers))
        scraper._tasks = [
            asyncio.create_task(every(scraper._interval_s, scraper._stop, r.take)) for r in readers if r.live
        ]
        return scraper

    async def mark(self) -> None:
        """One reading of every live source now, off the interval: the runner takes one just
        before the load starts, so the window's first edge lies close after a reading (the
        counter is interpolated between readings; the error is the power change across that
        gap)."""
        await asyncio.gather(*(r.take() for r in self._readers if r.live))

    async def stop(self) -> TelemetrySeries:
        """Stop the interval readings, take the last one of each live source, close them and
        return what was read."""
        self._stop.set()
        if self._tasks:
            await asyncio.gather(*self._tasks)
            self._tasks = []
            await asyncio.gather(*(r.take() for r in self._readers if r.live))
        await self.aclose()
        series = TelemetrySeries([r.source for r in self._readers], self._interval_s)
        if not self._readers:
            series.note = NO_SOURCES
        for r in self._readers:
            series.rows += r.rows()
        series.rows.sort(key=lambda row: row["t_ns"])
        if self._readers and not series.rows:
            series.note = "no telemetry source could be read: " + "; ".join(
                r.source.note or r.source.kind for r in self._readers
            )
        return series

    async def aclose(self) -> None:
        for t in self._tasks:
            t.cancel()
            # not BaseException: a Ctrl-C (KeyboardInterrupt) must reach the run
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        if not self._closed:
            self._closed = True
            for r in self._readers:
                await r.aclose()


def write_rows(run_dir: Path, series: TelemetrySeries) -> None:
    """``telemetry.jsonl``: one line per GPU per reading, when any source was read."""
    if series.rows:
        write_jsonl(Path(run_dir) / TELEMETRY, series.rows)
