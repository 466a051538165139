"""The over-saturation verdict of a stage (analysis/saturation.py), on literal records: a queue that
grows is over-saturated, a flat one stable, a closed loop never, too few requests undetermined."""

from __future__ import annotations

import numpy as np

from loadgen.analysis.saturation import assess
from loadgen.analysis.table import RecordTable
from loadgen.records import RequestRecord

S = 1_000_000_000


def stage(n: int, gap_s: float, service_s, ttft_s, warmup: int = 0) -> RecordTable:
    """``n`` requests scheduled ``gap_s`` apart; request i is served for ``service_s(i)`` seconds
    and gets its first token ``ttft_s(i)`` after its scheduled send."""
    records = []
    for i in range(n):
        t = int(i * gap_s * S)
        r = RequestRecord(i, i < warmup, t, t, 8, 8)
        r.ok, r.t_first_token_ns, r.t_end_ns, r.output_tokens = True, t + int(ttft_s(i) * S), 0, 8
        r.t_end_ns = t + int(service_s(i) * S)
        records.append(r)
    return RecordTable.from_records(records)


def test_a_queue_that_grows_is_over_saturated():
    """Arrivals every 50 ms served in 0.5 s plus a wait that grows 10 ms a request: the requests
    owed and TTFT both grow, far beyond their margins."""
    block = assess(stage(300, 0.05, lambda i: 0.5 + 0.01 * i, lambda i: 0.05 + 0.01 * i))
    assert block["verdict"] == "over_saturated" and block["bins"] == 12
    out, ttft = block["signals"]["outstanding"], block["signals"]["ttft_ms"]
    assert out["grows"] and ttft["grows"]
    # TTFT grows 10 ms per request, 20 requests a second: 200 ms per second of the window.
    assert abs(ttft["slope_per_s"] - 200.0) < 1.0 and ttft["margin_per_s"] < 1.0
    assert block["reason"] == "growing: outstanding, ttft_ms"


def test_a_steady_stage_is_stable_even_with_noise():
    rng = np.random.default_rng(0)
    service = rng.uniform(0.3, 0.7, 300)
    block = assess(stage(300, 0.05, lambda i: service[i], lambda i: 0.05 + service[i] / 10))
    assert block["verdict"] == "stable" and block["reason"] == "nothing grows"
    assert not block["signals"]["outstanding"]["grows"]


def test_a_closed_loop_whose_latency_grows_is_not_over_saturated():
    """One request at a time, each slower than the last: TTFT grows, but the requests owed stay
    one, so the server is not falling behind an offered load."""
    starts = np.cumsum([0.0] + [0.1 + 0.002 * i for i in range(199)])
    records = []
    for i, t0 in enumerate(starts):
        t = int(t0 * S)
        r = RequestRecord(i, False, t, t, 8, 8)
        r.ok, r.output_tokens = True, 8
        r.t_first_token_ns, r.t_end_ns = t + int((0.05 + 0.002 * i) * S), t + int((0.1 + 0.002 * i) * S)
        records.append(r)
    block = assess(RecordTable.from_records(records))
    assert block["signals"]["ttft_ms"]["grows"] and not block["signals"]["outstanding"]["grows"]
    assert block["verdict"] == "stable"


def test_the_servers_waiting_queue_alone_says_over_saturated():
    """A flat client view but a server queue growing by one request a second (scraped every
    0.5 s) is over-saturated: the server is the one falling behind."""
    table = stage(300, 0.05, lambda i: 0.5, lambda i: 0.05)
    waiting = [(int(k * 0.5 * S), 0.5 * k) for k in range(40)]
    block = assess(table, waiting)
    assert block["signals"]["waiting"]["grows"] and block["verdict"] == "over_saturated"
    assert abs(block["signals"]["waiting"]["slope_per_s"] - 1.0) < 0.01  # bins hold 2 or 3 scrapes


def test_too_few_requests_is_undetermined_never_stable():
    block = assess(stage(29, 0.05, lambda i: 0.5 + 0.1 * i, lambda i: 0.05 + 0.1 * i))
    assert block["verdict"] == "undetermined" and block["bins"] == 0
    assert block["reason"] == "29 measured requests: at least 30 are needed to tell a trend from noise"


def test_warm_up_requests_are_owed_but_not_measured():
    """Warm-up requests count toward the requests outstanding while they run, but not toward
    the measured requests the bins need or the TTFT trend."""
    block = assess(stage(40, 0.05, lambda i: 0.5, lambda i: 0.05, warmup=15))
    assert block["verdict"] == "undetermined"
    assert "25 measured requests" in block["reason"]
