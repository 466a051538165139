"""The DCGM reader over a real socket: a scripted exporter (the fixture's two H100s) whose GPU 1
energy counter resets, which fails one scrape with HTTP 503, and whose GPU 0 vanishes; the
scraper keeps the lines it needs, parses them after, and the block says what happened."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from aiohttp import web

from loadgen.config.telemetry import TelemetryConfig
from loadgen.server.gpu_scraper import TelemetryScraper
from loadgen.server.telemetry import telemetry_block

FIXTURE = (Path(__file__).parents[1] / "fixtures" / "dcgm" / "h100x2.prom").read_text()
ENERGY = re.compile(r'^(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{gpu="(\d)".*\}) \d+$')
UUID0 = "GPU-5fa8e1c4-0d3b-7c21-9a4e-3f0c6b2d8e11"
UUID1 = "GPU-a2d47b90-6e15-4c8f-b7d3-1e9f5a6c0b42"


def exposition(energy_mj: dict[str, int]) -> str:
    """The fixture with these GPUs only (by index) and these energy counters."""
    out = []
    for line in FIXTURE.splitlines():
        gpu = re.search(r'gpu="(\d)"', line)
        if gpu and gpu.group(1) not in energy_mj:
            continue
        m = ENERGY.match(line)
        out.append(f"{m.group(1)} {energy_mj[m.group(2)]}" if m else line)
    return "\n".join(out) + "\n"


def script(n: int) -> str | None:
    """GET n: GPU 0 adds 50 J and GPU 1 30 J a scrape; GPU 1's counter resets at GET 3; GET 5
    fails; from GET 6 on GPU 0 is gone. None: answer 503."""
    if n == 5:
        return None
    gpu1 = 2_000_000 + 30_000 * n if n < 3 else 1_000 + 30_000 * (n - 3)
    gpus = {"1": gpu1} if n >= 6 else {"0": 1_000_000 + 50_000 * n, "1": gpu1}
    return exposition(gpus)


@pytest.fixture
def exporter():
    served: list[int] = []
    enough = asyncio.Event()

    async def metrics(request: web.Request) -> web.Response:
        n = len(served)
        served.append(n)
        if n >= 9:
            enough.set()
        body = script(n)
        if body is None:
            return web.Response(status=503, text="busy")
        return web.Response(text=body, content_type="text/plain")

    return metrics, served, enough


def test_resets_a_failed_scrape_and_a_vanished_gpu(exporter):
    metrics, served, enough = exporter

    async def main():
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            config = TelemetryConfig(dcgm=(f"http://127.0.0.1:{port}/metrics",), interval_s=0.05)
            scraper = await TelemetryScraper.open(config, None, "httptools")
            await enough.wait()
            return await scraper.stop()
        finally:
            await runner.cleanup()

    series = asyncio.run(main())
    (source,) = series.sources
    n = len(served)
    assert (source.kind, source.readings, source.failed) == ("dcgm", n - 1, 1)
    assert source.note == f"GET {source.url}: HTTP 503"
    gpu0 = [r for r in series.rows if r["uuid"] == UUID0]
    gpu1 = [r for r in series.rows if r["uuid"] == UUID1]
    assert [r["energy_mj"] for r in gpu0] == [1_000_000 + 50_000 * i for i in range(5)]
    assert len(gpu1) == n - 1 and gpu1[3]["energy_mj"] == 1_000
    span = (series.rows[0]["t_ns"], series.rows[-1]["t_ns"])
    block = telemetry_block(series, span, (1000, 1000), None, False)
    assert block is not None
    g0, g1 = block["gpus"]
    assert (g0["vanished"], g0["counter_resets"], g0["energy_j"]) == (True, 0, pytest.approx(200.0))
    assert g0["covered_fraction"] == pytest.approx((gpu0[-1]["t_ns"] - span[0]) / (span[1] - span[0]))
    reset_s = (gpu1[3]["t_ns"] - gpu1[2]["t_ns"]) / 1e9
    assert (g1["vanished"], g1["counter_resets"], g1["estimated_s"]) == (False, 1, pytest.approx(reset_s))
    # From the counter: 60 J before the reset, then 30 J a GET from GET 3 to the last (n - 1);
    # the reset's interval from its two power readings (the fixture's 118.921 W).
    assert g1["energy_j"] == pytest.approx(60.0 + 30.0 * (n - 4) + 118.921 * reset_s)
    assert block["energy"]["complete"] is False
    assert [n.split(":")[0] for n in block["notes"]][1:] == [
        f"GPU 0 ({UUID0}, NVIDIA H100 80GB HBM3) vanished",
        f"GPU 1 ({UUID1}, NVIDIA H100 80GB HBM3)",
    ]
