"""The report's GPU section: each GPU read during the run (utilisation, memory, power, energy)
and energy per token, from the summary's ``telemetry`` block; and what the corners table says
of energy. A run without the block gets a line saying why (its conditions have the reason)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen import metric_defs
from loadgen.report.blocks import Image, Section, Table, Text, money, num, pct
from loadgen.summary import Summary, TelemetryEnergy

GB = 1e9
NO_ENERGY = "no telemetry sources configured"
HOW = "set telemetry.dcgm or telemetry.nvml"
# The registry's energy figures, in the report's energy table.
ENERGY_ROWS: tuple[metric_defs.MetricDef, ...] = tuple(
    d for d in metric_defs.RUN_SCALARS if d.report == "energy"
)


def telemetry_section(summary: Summary, plots: Sequence[Image] = ()) -> Section | None:
    """The GPUs' table, the energy table, the notes and the telemetry plot; a sentence when
    the run read no GPU; None for a summary that predates telemetry (no block, no conditions)."""
    block = summary.get("telemetry")
    said = summary["conditions"].get("telemetry") if summary.get("conditions") else None
    if not block and not said:
        return None
    if not block:
        why = said["note"] if said else None
        text = f"Not measured: {why or NO_ENERGY} ({HOW}; see the telemetry guide)."
        return Section("GPU telemetry and energy", (Text(text),))
    gpus = tuple(
        (
            f"{g['gpu']} {g.get('model') or ''}".strip(),
            g.get("host") or "-",
            pct(g["utilization_mean"]),
            num(_gb(g["memory_used_mean_bytes"])),
            num(_gb(g["memory_used_peak_bytes"])),
            num(g["power_mean_w"], 0),
            num(g["energy_j"], 0),
        )
        for g in block["gpus"]
    )
    parts: list[Any] = [
        Text(
            f"Read every {block['interval_s']:g} s from "
            + ", ".join(f"{s['kind']} {s['url'] or ''}".strip() for s in block["sources"])
            + "; over the measured window (warm-up excluded). Energy is the energy counter's "
            "difference, not power x time."
        ),
        Table(
            ("GPU", "host", "utilisation", "memory mean (GB)", "memory peak (GB)", "power (W)", "energy (J)"),
            gpus,
            "llrrrrr",
        ),
    ]
    energy = block.get("energy")
    if energy is not None:
        streamed = _streamed(summary)
        rows = [
            (d.label, num(metric_defs.lookup(summary, d.name), max(d.digits, 0)))
            for d in ENERGY_ROWS
            if d.applies_to(streamed)
        ]
        rows.append(("energy (J) over the window", num(energy["joules"], 0)))
        if energy["price_per_kwh"] is not None:
            token, usd = _priced(energy, streamed)
            price = money(energy["price_per_kwh"])
            rows.append((f"energy cost per million {token}s at {price}/kWh", money(usd)))
        parts.append(Table(("energy", "value"), tuple(rows), "lr"))
    parts += [Text(note) for note in block["notes"]]
    return Section("GPU telemetry and energy", (*parts, *plots))


def energy_text(summary: Summary) -> str:
    """The corners table's energy clause: joules per output token (per input token for a
    pooling run), mean power, the GPUs' peak memory and the electricity per million of those
    tokens; or why the run has none."""
    block = summary.get("telemetry")
    if not block or "energy" not in block:
        said = summary["conditions"].get("telemetry") if summary.get("conditions") else None
        why = (said["note"] if said else None) or NO_ENERGY
        return f"GPU energy not measured ({why}; {HOW})"
    energy, gpus = block["energy"], block["gpus"]
    peak = max((g["memory_used_peak_bytes"] or 0.0 for g in gpus), default=0.0)
    streamed = _streamed(summary)
    token, usd = _priced(energy, streamed)
    per_token = energy["j_per_output_token"] if streamed else energy["j_per_total_token"]
    text = (
        f"{num(per_token, 3)} J per {token}, {num(energy['mean_watts'], 0)} W "
        f"mean over {energy['gpus']} GPU{'' if energy['gpus'] == 1 else 's'}, GPU memory peak "
        f"{num(peak / GB, 1)} GB"
    )
    if usd is not None:
        text += f", energy {money(usd)} per million {token}s"
    return text


def _streamed(summary: Summary) -> bool:
    """A run of a token stream; False for a pooling run (embeddings, rerank), whose work is its
    input tokens: no output token to put energy or its cost per."""
    return metric_defs.present(summary, "output_tokens_per_s")


def _priced(energy: TelemetryEnergy, streamed: bool) -> tuple[str, float | None]:
    """(the token energy and its cost are per, the energy's cost per million of them)."""
    if streamed:
        return "output token", energy["usd_per_million_output_tokens"]
    return "input token", energy["usd_per_million_total_tokens"]


def _gb(v: float | None) -> float | None:
    return None if v is None else v / GB
