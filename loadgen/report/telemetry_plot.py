"""The GPU telemetry plot: each GPU's power, utilisation and memory over the run, on the
client's clock (seconds from the measured window's start), with the window and each stage's
start marked, so what the GPUs did sits beside what the requests saw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from matplotlib.axes import Axes

from loadgen.report.plots import Plot, legend, new_figure, to_png
from loadgen.server.gpu_scraper import TELEMETRY
from loadgen.summary import Summary

PLOT_NAME = "gpu_telemetry"
MIB = 2**20


def load_rows(run_dir: str | Path) -> list[dict]:
    """The readings of a saved run (``telemetry.jsonl``), or [] when it has none."""
    path = Path(run_dir) / TELEMETRY
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def telemetry_plot(summary: Summary, rows: Sequence[dict]) -> Plot | None:
    """Three panels on one time axis (power, utilisation, memory used), a line per GPU; None
    without readings or a measured window."""
    block = summary.get("telemetry")
    window = summary.get("window") or {}
    t0, t1 = window.get("start_ns"), window.get("end_ns")
    if not rows or not block or t0 is None or t1 is None:
        return None
    fig = new_figure((9.0, 6.4))
    ax_w, ax_u, ax_m = fig.subplots(3, 1, sharex=True)
    by_gpu: dict[str, list[dict]] = {}
    for r in rows:
        by_gpu.setdefault(r["uuid"], []).append(r)
    for readings in by_gpu.values():
        x = (np.array([r["t_ns"] for r in readings], np.int64) - t0) / 1e9
        label = f"GPU {readings[0]['gpu']} {readings[0].get('host') or ''}".strip()
        for ax, key, scale in (
            (ax_w, "power_w", 1.0),
            (ax_u, "util_pct", 1.0),
            (ax_m, "fb_used_mib", MIB / 1e9),
        ):
            y = np.array([np.nan if r.get(key) is None else r[key] * scale for r in readings])
            ax.plot(x, y, marker=".", lw=1.2, label=label)
    for ax, ylabel in ((ax_w, "power (W)"), (ax_u, "utilisation (%)"), (ax_m, "memory used (GB)")):
        ax.set_ylabel(ylabel)
        ax.grid(True, color="#eeeeee")
        ax.set_ylim(bottom=0)
        _mark(ax, t0, t1, summary)
    ax_m.set_xlabel("seconds from the measured window's start")
    if len(by_gpu) > 1:
        legend(ax_w, loc="upper right", fontsize=8)
    ax_w.set_title(_title(block))
    return Plot(
        PLOT_NAME,
        "GPU telemetry",
        "Each GPU's power, utilisation and memory used, as its source reported them at each "
        "reading, on the client's clock; dotted lines mark the measured window (and each stage's "
        "start). Energy per token comes from the energy counter over the window, not from these "
        "power readings.",
        to_png(fig),
    )


def memory_overlay(ax: Axes, rows: Sequence[Mapping[str, Any]], t0: int) -> Any | None:
    """Each GPU's memory used (GB) on a right-hand axis over ``ax`` (the server view's KV-cache
    panel), on the same clock (seconds from ``t0``); returns that axis, None without readings."""
    by_gpu: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("fb_used_mib") is not None:
            by_gpu.setdefault(r["uuid"], []).append(r)
    if not by_gpu:
        return None
    twin = ax.twinx()
    for readings in by_gpu.values():
        x = (np.array([r["t_ns"] for r in readings], np.int64) - t0) / 1e9
        y = np.array([r["fb_used_mib"] * MIB / 1e9 for r in readings])
        twin.plot(x, y, color="#8c564b", lw=1.0, ls="-.", label=f"GPU {readings[0]['gpu']} memory used")
    twin.set_ylabel("GPU memory used (GB)")
    twin.set_ylim(bottom=0)
    legend(twin, loc="lower right", fontsize=8)
    return twin


def mark_stages(ax: Axes, t0: int, summary: Summary) -> None:
    """A dashed line where each stage after the first starts (its measured window's start)."""
    for s in summary.get("stages") or []:
        start = s["window"]["start_ns"] if "window" in s else None
        if start is not None and s["index"]:
            ax.axvline((start - t0) / 1e9, color="#bbbbbb", ls="--", lw=0.8)


def _mark(ax: Axes, t0: int, t1: int, summary: Summary) -> None:
    """The measured window's edges, and where each stage after the first starts."""
    for x in (0.0, (t1 - t0) / 1e9):
        ax.axvline(x, color="#888888", ls=":", lw=1)
    mark_stages(ax, t0, summary)


def _title(block: Any) -> str:
    energy = block.get("energy")
    if not energy or energy.get("j_per_output_token") is None:
        return "GPU telemetry"
    return (
        f"GPU telemetry: {energy['j_per_output_token']:.3f} J per output token, "
        f"{energy['mean_watts']:.0f} W mean over {energy['gpus']} GPU{'' if energy['gpus'] == 1 else 's'}"
    )
