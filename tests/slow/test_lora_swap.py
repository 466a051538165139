"""The simulator's adapter swap cost, seen in the client's TTFT: two adapters alternating at
c=1 with one slot pay a load every request; with two slots they pay it only the first time.
The two runs are compared with each other and with the simulator's own log, never with a bare
wall-clock figure alone."""

from __future__ import annotations

import numpy as np
import orjson

from loadgen.result import GROUND_TRUTH

import helpers

LOAD_MS = 40.0


def _run(tmp_path, max_loras: int) -> tuple[float, float]:
    """(client TTFT p50, the simulator's TTFT p50) in ms of 12 requests, a and b in turn."""
    profile = helpers.profile(
        tmp_path / f"slots{max_loras}",
        None,
        **{
            "sim": {
                "model_name": "base",
                "lora_adapters": ["a", "b"],
                "max_loras": max_loras,
                "lora_load_ms": LOAD_MS,
                "time_scale": 1.0,
                "seed": 1,
            },
            "target.model": "base",
            "load.concurrency": 1,
            "load.warmup_requests": 2,  # the first two loads happen in both runs: left out
            "workload.num_requests": 12,
            "workload.models": {"choice": "round_robin", "mix": ["a", "b"]},
        },
    )
    res = helpers.run(profile)
    assert res.summary["counts"]["ok"] == 12
    truth = [orjson.loads(line) for line in (res.run_dir / GROUND_TRUTH).read_bytes().splitlines()]
    server = [(t["first_token_ns"] - t["arrival_ns"]) / 1e6 for t in truth[2:]]
    return res.summary["metrics"]["ttft_ms"]["p50"], float(np.median(server))


def test_one_slot_pays_the_swap_in_ttft(tmp_path):
    """TTFT p50 with max_loras=1 exceeds max_loras=2's by lora_load_ms (within 20 %), and the
    client's difference equals the simulator's own within 3 ms."""
    client_1, server_1 = _run(tmp_path, 1)
    client_2, server_2 = _run(tmp_path, 2)
    client_delta, server_delta = client_1 - client_2, server_1 - server_2
    print(
        f"TTFT p50: 1 slot {client_1:.2f} ms, 2 slots {client_2:.2f} ms"
        f" (server {server_1:.2f} / {server_2:.2f})"
    )
    assert abs(server_delta - LOAD_MS) < 0.2 * LOAD_MS, server_delta
    assert abs(client_delta - server_delta) < 3.0, (client_delta, server_delta)
