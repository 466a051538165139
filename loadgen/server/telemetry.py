"""The summary's ``telemetry`` block: each GPU over a measured window, and energy per token.

Energy comes from the energy counter (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, NVML's total energy),
never from power x time: power is sampled once per interval and misses everything between two
samples, while the counter integrates every millisecond on the board. The counter is read at
the readings around the window and interpolated linearly to its edges (the error is the
curvature of energy inside one interval at each edge, nothing accumulates).

What a counter does wrong is said, not hidden: a counter that goes backwards (a reset, a driver
reload, a wrap) has that one interval's energy estimated as the mean of its two power readings x
its length (counted in ``estimated_s``, and the energy block is then not ``complete``); a GPU
whose readings stop before its source's (it vanished) or start late counts only the part of the
window it was read in (``covered_fraction``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.server.gpu_scraper import TELEMETRY, Source, TelemetrySeries
from loadgen.summary.telemetry import (
    ConditionsTelemetry,
    Telemetry,
    TelemetryEnergy,
    TelemetryGpu,
    TelemetrySource,
)

MIB = 2**20
J_PER_KWH = 3.6e6


def conditions(series: TelemetrySeries) -> ConditionsTelemetry:
    """Where the GPUs were read, and why the run has no block when it has none."""
    return {"sources": _sources(series.sources), "note": None if series.available else series.note}


def telemetry_block(
    series: TelemetrySeries,
    span: tuple[int, int],
    tokens: tuple[float, float],
    price_per_kwh: float | None,
    includes_warmup: bool,
) -> Telemetry | None:
    """The block over ``span`` (start and end ns of a measured window) with ``tokens`` (output,
    total) delivered in it; None when nothing was read."""
    if not series.available or span[1] <= span[0]:
        return None
    by_gpu: dict[str, list[dict]] = {}
    for row in series.rows:
        by_gpu.setdefault(row["uuid"], []).append(row)
    last_of: dict[str, int] = {}
    for row in series.rows:
        last_of[row["source"]] = max(last_of.get(row["source"], 0), row["t_ns"])
    notes = [f"{s.kind} {s.url or ''}: {s.note}".replace("  ", " ") for s in series.sources if s.note]
    gpus = [_gpu(readings, span, last_of[readings[0]["source"]], notes) for readings in by_gpu.values()]
    block: Telemetry = {
        "file": TELEMETRY,
        "interval_s": series.interval_s,
        "includes_warmup": includes_warmup,
        "sources": _sources(series.sources),
        "gpus": gpus,
        "notes": notes,
    }
    energy = _energy(gpus, span, tokens, price_per_kwh)
    if energy is not None:
        block["energy"] = energy
    else:
        notes.append("no GPU gave an energy counter: energy per token is not computed (never power x time)")
    return block


def _gpu(readings: list[dict], span: tuple[int, int], source_last: int, notes: list[str]) -> TelemetryGpu:
    a, b = span
    first = readings[0]
    ts = np.array([r["t_ns"] for r in readings], dtype=np.int64)
    inside = [r for r in readings if a <= r["t_ns"] <= b] or _around(readings, ts, a, b)
    name = f"GPU {first['gpu']} ({first['uuid']}, {first.get('model') or 'model unknown'})"
    vanished = int(ts[-1]) < min(source_last, b)
    covered = (min(b, int(ts[-1])) - max(a, int(ts[0]))) / (b - a)
    if vanished:
        notes.append(
            f"{name} vanished: its last reading was {(int(ts[-1]) - a) / 1e9:.2f} s into the window; "
            "its figures cover the window up to it"
        )
    if ts[0] > a:
        notes.append(f"{name} was first read {(int(ts[0]) - a) / 1e9:.2f} s into the window")
    energy_j, resets, estimated_s = _energy_j(readings, ts, a, b)
    if resets:
        notes.append(
            f"{name}: its energy counter went backwards {resets} time(s) (a reset or a wrap); "
            f"{estimated_s:.2f} s of the window are power x time instead"
        )
    used = [r["fb_used_mib"] * MIB for r in inside if r.get("fb_used_mib") is not None]
    return {
        "uuid": first["uuid"],
        "gpu": first["gpu"],
        "model": first.get("model"),
        "host": first.get("host"),
        "source": first["source"],
        "samples": sum(1 for r in readings if a <= r["t_ns"] <= b),
        "utilization_mean": _mean([r["util_pct"] / 100 for r in inside if r.get("util_pct") is not None]),
        "memory_used_mean_bytes": _mean(used),
        "memory_used_peak_bytes": max(used) if used else None,
        "power_mean_w": _mean([r["power_w"] for r in inside if r.get("power_w") is not None]),
        "energy_j": energy_j,
        "counter_resets": resets,
        "estimated_s": estimated_s,
        "covered_fraction": max(0.0, min(1.0, covered)),
        "vanished": vanished,
    }


def _energy_j(readings: list[dict], ts: np.ndarray, a: int, b: int) -> tuple[float | None, int, float]:
    """(joules over [a, b] from the counter, resets, seconds estimated as power x time)."""
    if all(r.get("energy_mj") is None for r in readings):
        return None, 0, 0.0
    cum = np.zeros(len(readings))
    estimated = np.zeros(len(readings), dtype=bool)
    resets = 0
    for i in range(1, len(readings)):
        prev, cur = readings[i - 1], readings[i]
        e0, e1 = prev.get("energy_mj"), cur.get("energy_mj")
        if e0 is not None and e1 is not None and e1 >= e0:
            step = (e1 - e0) / 1e3
        else:
            resets += int(e0 is not None and e1 is not None)
            watts = [w for w in (prev.get("power_w"), cur.get("power_w")) if w is not None]
            step = (sum(watts) / len(watts) if watts else 0.0) * (ts[i] - ts[i - 1]) / 1e9
            estimated[i] = True
        cum[i] = cum[i - 1] + step
    lo, hi = max(a, int(ts[0])), min(b, int(ts[-1]))
    if hi <= lo:
        return 0.0, resets, 0.0
    joules = float(np.interp(hi, ts, cum) - np.interp(lo, ts, cum))
    est_s = sum(
        max(0, min(hi, int(ts[i])) - max(lo, int(ts[i - 1]))) for i in range(1, len(ts)) if estimated[i]
    )
    return joules, resets, est_s / 1e9


def _energy(
    gpus: Sequence[TelemetryGpu], span: tuple[int, int], tokens: tuple[float, float], price: float | None
) -> TelemetryEnergy | None:
    counted = [g for g in gpus if g["energy_j"] is not None]
    if not counted:
        return None
    joules = sum(g["energy_j"] or 0.0 for g in counted)
    seconds = (span[1] - span[0]) / 1e9
    out_tok, all_tok = tokens
    kwh = joules / J_PER_KWH
    complete = all(g["covered_fraction"] >= 1.0 and not g["estimated_s"] for g in counted)
    return {
        "joules": joules,
        "seconds": seconds,
        "gpus": len(counted),
        "mean_watts": joules / seconds,
        "output_tokens": out_tok,
        "total_tokens": all_tok,
        "j_per_output_token": joules / out_tok if out_tok > 0 else None,
        "j_per_total_token": joules / all_tok if all_tok > 0 else None,
        "output_tokens_per_j": out_tok / joules if joules > 0 and out_tok > 0 else None,
        "kwh": kwh,
        "price_per_kwh": price,
        "usd_per_million_output_tokens": price * kwh / out_tok * 1e6 if price and out_tok > 0 else None,
        "usd_per_million_total_tokens": price * kwh / all_tok * 1e6 if price and all_tok > 0 else None,
        "complete": complete,
    }


def _around(readings: list[dict], ts: np.ndarray, a: int, b: int) -> list[dict]:
    """The reading before ``a`` and the one after ``b``: a window shorter than one interval."""
    i, j = int(np.searchsorted(ts, a, "right")) - 1, int(np.searchsorted(ts, b, "left"))
    return [readings[k] for k in {max(i, 0), min(j, len(readings) - 1)}]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _sources(sources: list[Source]) -> list[TelemetrySource]:
    out: list[Any] = [
        {"kind": s.kind, "url": s.url, "readings": s.readings, "failed": s.failed, "note": s.note}
        for s in sources
    ]
    return out
