"""The client's metrics served to Prometheus (``--metrics-port``) and pushed over OTLP
(``--otlp``), both from ``instruments.INSTRUMENTS``.

Prometheus: a collector over running totals (counters and histogram buckets kept per label set,
updated once per finished record; the request counts and in-flight gauge read from the run's
live counters when scraped), served by ``prometheus_client``'s HTTP server on its own thread,
so a scrape never waits on the event loop that measures. OTLP: the OpenTelemetry SDK's
instruments (an optional extra, ``loadgen[otel]``), recorded once per finished record and pushed
by its periodic reader over OTLP/HTTP, flushed when the run ends.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from loadgen.errors import ConfigError
from loadgen.live.instruments import INSTRUMENTS, Instrument, Observation, observe, prometheus_name
from loadgen.live.stats import LiveStats

__all__ = ["OtlpExporter", "PrometheusExporter"]

_BY_FIELD = {i.field: i for i in INSTRUMENTS if i.kind == "histogram"}
_OTEL_ATTRIBUTES = ("gen_ai.operation.name", "server.address")  # of the labels, on every point


def _in_flight(stats: LiveStats) -> int:
    counters = stats.counters
    return 0 if counters is None else counters.in_flight


def _started(stats: LiveStats) -> int:
    counters = stats.counters
    return 0 if counters is None else counters.done + counters.in_flight


class _Buckets:
    """One histogram's running state for one label set: per-bucket counts, sum, count."""

    __slots__ = ("counts", "sum", "n")

    def __init__(self, n_bounds: int) -> None:
        self.counts = [0] * (n_bounds + 1)
        self.sum = 0.0
        self.n = 0


class _Tally:
    """What both exporters keep alike: the run's live figures, the labels, the stage, the
    finished requests by outcome and error type; ``tally`` counts a record and gives its values
    when it is measured (not warm-up)."""

    def __init__(self, stats: LiveStats, labels: dict[str, str] | None) -> None:
        self.stats = stats  # its ``counters`` (in flight, done) once the run started
        self.labels = dict(labels or {})  # gen_ai.operation.name, server.address, model
        self.stage = 0
        self._finished: dict[tuple[str, str], int] = defaultdict(int)  # (outcome, error.type)

    def tally(self, rec: Any) -> Observation | None:
        o = observe(rec)
        self.stage = o.stage
        self._finished[(o.outcome, o.error_type or "")] += 1
        return None if o.warmup else o


class PrometheusExporter(_Tally, Collector):
    """Serves the instruments on ``host:port`` (``/metrics``) until ``close``."""

    def __init__(
        self, stats: LiveStats, port: int, host: str = "127.0.0.1", labels: dict[str, str] | None = None
    ) -> None:
        super().__init__(stats, labels)
        self._hist: dict[tuple[str, tuple[tuple[str, str], ...]], _Buckets] = {}
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror}); pick another port"
            ) from None
        self.port = self._server.server_port
        stats.listeners.append(self.record)

    # --------------------------------------------------------------------- recording
    def record(self, rec: Any) -> None:
        o = self.tally(rec)
        if o is None:
            return
        attrs = self._attrs(o)
        if o.gaps_s.size:  # a long stream's every gap: counted into the buckets at once
            self._observe_many(_BY_FIELD["gaps_s"], attrs, o.gaps_s)
        for field, value, extra in o.points():
            named = tuple((k.replace(".", "_"), v) for k, v in extra)
            self._observe(_BY_FIELD[field], (*attrs, *named), value)

    def _attrs(self, o: Observation) -> tuple[tuple[str, str], ...]:
        return (("gen_ai_request_model", o.model or self.labels.get("model", "")),)

    def _observe_many(self, inst: Instrument, attrs: tuple[tuple[str, str], ...], values: np.ndarray) -> None:
        b = self._buckets(inst, attrs)
        counts = np.bincount(np.searchsorted(inst.buckets, values, side="left"), minlength=len(b.counts))
        b.counts = [c + int(k) for c, k in zip(b.counts, counts)]
        b.sum += float(values.sum())
        b.n += len(values)

    def _buckets(self, inst: Instrument, attrs: tuple[tuple[str, str], ...]) -> _Buckets:
        key = (inst.name, attrs)
        b = self._hist.get(key)
        if b is None:
            b = self._hist[key] = _Buckets(len(inst.buckets))
        return b

    def _observe(self, inst: Instrument, attrs: tuple[tuple[str, str], ...], value: float) -> None:
        b = self._buckets(inst, attrs)
        b.counts[bisect.bisect_left(inst.buckets, value)] += 1
        b.sum += value
        b.n += 1

    # --------------------------------------------------------------------- scraping
    def collect(self) -> Iterator[Any]:
        base = {k.replace(".", "_"): v for k, v in self.labels.items() if k != "model"}
        names = sorted(base)
        for inst in INSTRUMENTS:
            name = prometheus_name(inst)
            if inst.name == "loadgen.client.requests.started":
                c = CounterMetricFamily(name.removesuffix("_total"), inst.description, labels=names)
                c.add_metric([base[n] for n in names], _started(self.stats))
                yield c
            elif inst.name == "loadgen.client.requests.finished":
                c = CounterMetricFamily(
                    name.removesuffix("_total"), inst.description, labels=[*names, "outcome", "error_type"]
                )
                for (outcome, error), n in sorted(self._finished.items()):
                    c.add_metric([*(base[n_] for n_ in names), outcome, error], n)
                yield c
            elif inst.kind == "gauge":
                g = GaugeMetricFamily(name, inst.description, labels=names)
                value = _in_flight(self.stats) if inst.name.endswith("in_flight") else self.stage
                g.add_metric([base[n] for n in names], value)
                yield g
            else:
                yield self._family(inst, name, base, names)

    def _family(
        self, inst: Instrument, name: str, base: dict[str, str], names: list[str]
    ) -> HistogramMetricFamily:
        rows = [(attrs, b) for (n, attrs), b in sorted(self._hist.items()) if n == inst.name]
        extra = [k for k, _ in rows[0][0]] if rows else ["gen_ai_request_model"]
        h = HistogramMetricFamily(name, inst.description, labels=[*names, *extra])
        for attrs, b in rows:
            cumulative, buckets = 0, []
            for bound, count in zip([*map(str, inst.buckets), "+Inf"], b.counts):
                cumulative += count
                buckets.append((bound, cumulative))
            h.add_metric([*(base[n] for n in names), *(v for _, v in attrs)], buckets, b.sum)
        return h

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class OtlpExporter(_Tally):
    """Pushes the instruments to an OTLP/HTTP endpoint every ``interval_s`` (and at ``close``)."""

    def __init__(
        self, stats: LiveStats, url: str, interval_s: float = 5.0, labels: dict[str, str] | None = None
    ) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.metrics import Observation as OtelObservation
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
            from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
            from opentelemetry.sdk.resources import Resource
        except ImportError:
            raise ConfigError("--otlp needs the OpenTelemetry SDK: pip install 'loadgen[otel]'") from None
        super().__init__(stats, labels)
        endpoint = url.rstrip("/") + ("" if url.rstrip("/").endswith("/v1/metrics") else "/v1/metrics")
        self._reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=endpoint), export_interval_millis=int(interval_s * 1000)
        )
        views = [
            View(instrument_name=i.name, aggregation=ExplicitBucketHistogramAggregation(list(i.buckets)))
            for i in INSTRUMENTS
            if i.kind == "histogram"
        ]
        resource = Resource.create(
            {"service.name": "loadgen", **{k: v for k, v in self.labels.items() if k != "model"}}
        )
        self._provider = MeterProvider(resource=resource, metric_readers=[self._reader], views=views)
        meter = self._provider.get_meter("loadgen")
        self._hist = {
            i.field: meter.create_histogram(i.name, unit=i.unit, description=i.description)
            for i in INSTRUMENTS
            if i.kind == "histogram"
        }
        by_name = {i.name: i for i in INSTRUMENTS}

        def started(_options: Any) -> list[Any]:
            return [OtelObservation(_started(self.stats))]

        def finished(_options: Any) -> list[Any]:
            return [
                OtelObservation(n, {"outcome": o, **({"error.type": e} if e else {})})
                for (o, e), n in self._finished.items()
            ]

        def in_flight(_options: Any) -> list[Any]:
            return [OtelObservation(_in_flight(self.stats))]

        def stage(_options: Any) -> list[Any]:
            return [OtelObservation(self.stage)]

        for name, callback in (
            ("loadgen.client.requests.started", started),
            ("loadgen.client.requests.finished", finished),
        ):
            i = by_name[name]
            meter.create_observable_counter(name, [callback], unit=i.unit, description=i.description)
        for name, callback in (
            ("loadgen.client.requests.in_flight", in_flight),
            ("loadgen.client.stage", stage),
        ):
            i = by_name[name]
            meter.create_observable_gauge(name, [callback], unit=i.unit, description=i.description)
        stats.listeners.append(self.record)

    def record(self, rec: Any) -> None:
        o = self.tally(rec)
        if o is None:
            return
        attrs: dict[str, str] = {"gen_ai.request.model": o.model or self.labels.get("model", "")}
        attrs.update({k: v for k, v in self.labels.items() if k in _OTEL_ATTRIBUTES})
        for field, value, extra in o.points():
            self._hist[field].record(value, {**attrs, **dict(extra)})
        gaps = self._hist["gaps_s"]  # the SDK takes one value at a time
        for gap in o.gaps_s.tolist():
            gaps.record(gap, attrs)

    def close(self) -> None:
        self._provider.force_flush()
        self._provider.shutdown()
