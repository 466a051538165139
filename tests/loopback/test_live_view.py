"""What watches a run while it goes, checked against what the run wrote: the live figures equal
the summary's, the dashboard shows them, the Prometheus endpoint's counters and histograms and
the OTLP push carry exactly the run's records (in-process and from worker processes)."""

from __future__ import annotations

import asyncio
import http.server
import json
import math
import re
import subprocess
import threading
import urllib.request
from typing import ClassVar

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from loadgen.cli.dashboard import render
from loadgen.live.exporters import OtlpExporter, PrometheusExporter
from loadgen.live.instruments import INSTRUMENTS, prometheus_name
from loadgen.live.stats import LiveStats, LogHistogram
from loadgen.result import load_run
from loadgen.runner import api

from helpers import LOADGEN, cli_env

PRESET = "llama3-8b-fp16@h100"


def run_watched(make_profile, watch: LiveStats, **over):
    profile = make_profile(None, sim={"preset": PRESET}, **over)
    return asyncio.run(api.run_async(profile, watch=watch))


def measured(run_dir):
    frame = load_run(run_dir)
    return frame[frame["ok"] & ~frame["warmup"]]


class TestLogHistogram:
    def test_percentiles_are_within_one_percent(self):
        """10,000 lognormal draws: p50 and p99 within 1 % of numpy's on the same values."""
        values = np.random.default_rng(0).lognormal(3.0, 0.8, 10_000)
        h = LogHistogram()
        for v in values:
            h.add(float(v))
        for q in (50, 99):
            exact = float(np.percentile(values, q, method="higher"))
            assert h.percentile(q) == pytest.approx(exact, rel=0.0101)


class TestLiveStats:
    @pytest.mark.slow
    def test_stage_figures_equal_the_records(self, make_profile):
        """After a run, the stage-so-far p50/p99 of TTFT and TPOT are the records' (the sample at
        rank ceil(q n), as a histogram reads it) within the histogram's 1 %; the done count is
        every record, warm-up included, and there are no errors."""
        watch = LiveStats()
        res = run_watched(make_profile, watch, workload__num_requests=60, load__concurrency=6)
        snap = watch.snapshot()
        ok = measured(res.run_dir)
        for name in ("ttft_ms", "tpot_ms"):
            for q in (50, 99):
                exact = float(np.percentile(ok[name].dropna(), q, method="inverted_cdf"))
                assert snap.stage_so_far[name][f"p{q}"] == pytest.approx(exact, rel=0.0101), (name, q)
        assert snap.done == len(load_run(res.run_dir))
        assert snap.errors == {}
        assert watch.counters is not None and watch.counters.in_flight == 0

    @pytest.mark.slow
    def test_the_dashboard_shows_the_snapshot(self, make_profile):
        watch = LiveStats()
        run_watched(make_profile, watch, workload__num_requests=30, load__concurrency=4)
        snap = watch.snapshot()
        server = {"running": 3, "waiting": 1, "kv_cache_usage": 0.25}
        health = {"loop_lag_ms": 0.4, "cpu_percent": 12.0}
        console = Console(record=True, width=110)
        console.print(render(snap, watch.context, None, server, health, "loadgen t"))
        text = console.export_text()
        s = snap.stage_so_far["ttft_ms"]
        assert f"{s['p50']:,.1f}" in text and f"{s['p99']:,.1f}" in text
        assert "running 3   waiting 1   KV cache 25 %" in text
        assert "loop lag 0.4 ms   CPU 12 %" in text
        assert "stage 1/1 c=4" in text and "errors  none" in text


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return {f.name: f for f in text_string_to_metric_families(r.read().decode())}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "workers"])
def test_prometheus_carries_exactly_the_runs_records(make_profile, workers):
    """Finished counts by outcome, the TTFT histogram's count and sum, and the output-token
    histogram's sum equal the run's measured records; workers' records arrive the same way."""
    watch = LiveStats()
    exporter = PrometheusExporter(watch, 0, labels={"gen_ai.operation.name": "chat", "model": "m"})
    try:
        res = run_watched(
            make_profile, watch, workload__num_requests=40, load__concurrency=4, client__workers=workers
        )
        families = scrape(exporter.port)
    finally:
        exporter.close()
    ok = measured(res.run_dir)
    all_records = load_run(res.run_dir)
    by_name = {i.name: prometheus_name(i) for i in INSTRUMENTS}
    finished = families[by_name["loadgen.client.requests.finished"].removesuffix("_total")]
    counted = {s.labels["outcome"]: s.value for s in finished.samples if s.name.endswith("_total")}
    assert counted == {"ok": float(all_records["ok"].sum())}
    ttft = families[by_name["gen_ai.client.operation.time_to_first_chunk"]]
    count = next(s.value for s in ttft.samples if s.name.endswith("_count"))
    total = next(s.value for s in ttft.samples if s.name.endswith("_sum"))
    assert count == len(ok)
    assert total == pytest.approx(float(ok["ttft_ms"].sum()) / 1e3, rel=1e-9)
    tokens = families[by_name["gen_ai.client.token.usage"]]
    out = sum(
        s.value
        for s in tokens.samples
        if s.name.endswith("_sum") and s.labels["gen_ai_token_type"] == "output"
    )
    assert out == float(ok["output_tokens"].sum())
    started = families[by_name["loadgen.client.requests.started"].removesuffix("_total")]
    assert next(s.value for s in started.samples) == len(all_records)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "workers"])
def test_the_progress_counters_count_tokens_as_the_summary_does(make_profile, workers):
    """One counting rule for live tokens: the progress bar's counters (``Live``) add each
    finished request's ``counted_output_tokens``, in process and across worker processes, so
    after a run they hold every record's ok output tokens (warm-up included) and its count."""
    watch = LiveStats()
    res = run_watched(
        make_profile,
        watch,
        workload__num_requests=30,
        load__concurrency=4,
        load__warmup_requests=4,
        client__workers=workers,
    )
    records = load_run(res.run_dir)
    live = watch.counters
    assert (live.done, live.errors, live.in_flight) == (len(records), 0, 0)
    assert live.tokens == int(records.loc[records["ok"], "output_tokens"].sum()) > 0
    # The summary's throughput counts the same tokens over the measured (not warm-up) records.
    ok = measured(res.run_dir)
    window_s = res.summary["window"]["seconds"]
    assert res.summary["metrics"]["output_tokens_per_s"] == pytest.approx(
        float(ok["output_tokens"].sum()) / window_s, rel=1e-9
    )


class _Collector(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        type(self).bodies.append(self.rfile.read(n))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_otlp_push_carries_the_runs_records(make_profile):
    """A local OTLP/HTTP receiver gets gen_ai.client.operation.time_to_first_chunk with one
    point per measured record, in seconds, and the resource names the service."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    _Collector.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    watch = LiveStats()
    exporter = OtlpExporter(
        watch, f"http://127.0.0.1:{server.server_port}", interval_s=60, labels={"model": "m"}
    )
    try:
        res = run_watched(make_profile, watch, workload__num_requests=25, load__concurrency=5)
    finally:
        exporter.close()  # flushes the last export
        server.shutdown()
    ok = measured(res.run_dir)
    got: dict[str, float] = {}
    service = None
    for body in _Collector.bodies:
        req = ExportMetricsServiceRequest.FromString(body)
        for rm in req.resource_metrics:
            service = {a.key: a.value.string_value for a in rm.resource.attributes}.get("service.name")
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.HasField("histogram"):
                        got[m.name] = sum(p.count for p in m.histogram.data_points)
                        got[m.name + ".sum"] = sum(p.sum for p in m.histogram.data_points)
    assert service == "loadgen"
    assert got["gen_ai.client.operation.time_to_first_chunk"] == len(ok)
    assert math.isclose(
        got["gen_ai.client.operation.time_to_first_chunk.sum"], ok["ttft_ms"].sum() / 1e3, rel_tol=1e-9
    )


@pytest.mark.slow
def test_the_cli_serves_metrics_while_it_runs(tmp_path):
    """`loadgen run --metrics-port 0`: the port it prints answers during the run, with requests
    started growing between two scrapes."""
    cmd = [
        *LOADGEN,
        "run",
        "quickstart",
        "--duration",
        "4",
        "--ui",
        "none",
        "--metrics-port",
        "0",
        "--no-report",
    ]
    p = subprocess.Popen(
        [*cmd, "--out", str(tmp_path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=cli_env(),
        text=True,
    )
    try:
        port = None
        for line in p.stderr:
            if line.startswith("metrics  http://"):
                port = int(line.rsplit(":", 1)[1].split("/")[0])
                break
        assert port is not None
        name = prometheus_name(INSTRUMENTS[0]).removesuffix("_total")
        seen: list[float] = []
        while p.poll() is None and len({v for v in seen if v > 0}) < 2:
            try:
                seen.append(next(s.value for s in scrape(port)[name].samples))
            except OSError:  # a busy machine: the next scrape, while the run goes on
                pass
            threading.Event().wait(0.5)
        started = [v for v in seen if v > 0]
        assert len(set(started)) >= 2 and started[-1] > started[0], seen
    finally:
        p.wait(60)
    assert p.returncode == 0
    json.loads(next(tmp_path.glob("*/summary.json")).read_text())


def test_the_grafana_board_reads_only_metrics_loadgen_exports():
    """Every loadgen or gen_ai series the shipped board queries is one the exporter writes."""
    from pathlib import Path

    board = json.loads(
        (Path(__file__).parents[2] / "examples" / "grafana" / "loadgen-client.json").read_text()
    )
    exported = set()
    for inst in INSTRUMENTS:
        name = prometheus_name(inst)
        exported |= {name, f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    queried = {
        m
        for panel in board["panels"]
        for t in panel["targets"]
        for m in re.findall(r"\b((?:loadgen|gen_ai)_[a-z_]+)\b(?!\s*=)", t["expr"])
    }
    assert queried and queried <= exported, queried - exported
