"""What a million tokens cost, from the GPU-hour price and the measured throughput.

    $ per million tokens = gpu_hour_cost x gpu_count / 3600 / tokens_per_s x 1e6

for output tokens, for total (input + output) tokens, and for output tokens at goodput (only
the requests that met every per-request SLO count as delivered). The price comes from the
caller (``--gpu-hour-cost``) or the run's labels (``--label gpu_hour_cost=2.5``); the GPU count
from the caller or the label ``gpu_count`` (default 1), so a run states what it was priced at.

Pure numbers, in analysis: the report renders them, and ``loadgen capacity`` prices the
capacity it finds with the same formula, without reaching up into the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.summary import Summary

COST_LABEL, COUNT_LABEL = "gpu_hour_cost", "gpu_count"
FORMULA = "usd_per_million_tokens = gpu_hour_cost * gpu_count / 3600 / tokens_per_s * 1e6"


class CostError(LoadgenError, ValueError):
    """A GPU price or count that is not a positive number."""


@dataclass(frozen=True, slots=True)
class CostInputs:
    gpu_hour_cost: float  # USD per GPU-hour
    gpu_count: float
    cost_source: str  # where each came from, said in the report
    count_source: str


def cost_inputs(
    labels: dict[str, Any] | None, *, gpu_hour_cost: float | None = None, gpu_count: float | None = None
) -> CostInputs | None:
    """The price and GPU count to use: explicit arguments win over the run's labels.

    ``None`` when no price is known (neither argument nor ``gpu_hour_cost`` label).
    """
    labels = labels or {}
    if gpu_hour_cost is not None:
        cost, cost_src = _positive(gpu_hour_cost, "--gpu-hour-cost"), "--gpu-hour-cost"
    elif COST_LABEL in labels:
        cost, cost_src = _positive(labels[COST_LABEL], f"label {COST_LABEL}"), f"label {COST_LABEL}"
    else:
        return None
    if gpu_count is not None:
        count, count_src = _positive(gpu_count, "--gpu-count"), "--gpu-count"
    elif COUNT_LABEL in labels:
        count, count_src = _positive(labels[COUNT_LABEL], f"label {COUNT_LABEL}"), f"label {COUNT_LABEL}"
    else:
        count, count_src = 1.0, f"default: no {COUNT_LABEL} label"
    return CostInputs(cost, count, cost_src, count_src)


def cost_figures(summary: Summary, inputs: CostInputs) -> dict:
    """The ``cost.json`` content: the inputs, the throughputs used and $ per million tokens
    (a pooling run's, embeddings or rerank: also per million input tokens and items).

    A throughput of zero or none (nothing delivered) gives ``None`` for its price: no finite
    amount of money bought those tokens.
    """
    m = summary.get("metrics") or {}
    rates = {
        "output_tokens_per_s": m.get("output_tokens_per_s"),
        "total_tokens_per_s": m.get("total_tokens_per_s"),
        "goodput_output_tokens_per_s": (m.get("goodput") or {}).get("output_tokens_per_s"),
    }
    per_hour = inputs.gpu_hour_cost * inputs.gpu_count
    out = {
        "gpu_hour_cost_usd": inputs.gpu_hour_cost,
        "gpu_count": inputs.gpu_count,
        "source": {COST_LABEL: inputs.cost_source, COUNT_LABEL: inputs.count_source},
        "usd_per_hour": per_hour,
        "throughput": rates,
        "usd_per_million_output_tokens": per_million(per_hour, rates["output_tokens_per_s"]),
        "usd_per_million_total_tokens": per_million(per_hour, rates["total_tokens_per_s"]),
        "usd_per_million_output_tokens_at_goodput": per_million(
            per_hour, rates["goodput_output_tokens_per_s"]
        ),
        "formula": FORMULA,
        "energy": energy_cost(summary),
    }
    if "items_per_s" in m:  # embeddings, rerank: no output; what they deliver is items and input
        rates["input_tokens_per_s"] = m.get("input_tokens_per_s")
        rates["items_per_s"] = m.get("items_per_s")
        out["usd_per_million_input_tokens"] = per_million(per_hour, rates["input_tokens_per_s"])
        out["usd_per_million_items"] = per_million(per_hour, rates["items_per_s"])
    return out


def energy_cost(summary: Summary) -> dict | None:
    """The electricity the GPUs drew, priced (``telemetry.price_per_kwh``): $ per million output
    and total tokens from the measured energy (the summary's ``telemetry.energy``), beside the
    GPU-hour price; None without GPU energy or a price."""
    block = summary.get("telemetry")
    energy = block.get("energy") if block else None
    if energy is None or energy["price_per_kwh"] is None:
        return None
    return {
        "price_per_kwh": energy["price_per_kwh"],
        "kwh": energy["kwh"],
        "usd_per_million_output_tokens": energy["usd_per_million_output_tokens"],
        "usd_per_million_total_tokens": energy["usd_per_million_total_tokens"],
    }


def per_million(usd_per_hour: float, tokens_per_s: float | None) -> float | None:
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return usd_per_hour / 3600.0 / tokens_per_s * 1e6


def _positive(value: Any, where: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise CostError(f"{where}: {value!r} is not a number (expected e.g. 2.5)") from None
    if not math.isfinite(x) or x <= 0:
        raise CostError(f"{where}: {value!r} must be a positive number")
    return x
