"""The report's cost section: what a GPU-hour buys of what the run delivered, from ``cost.json``
(``analysis.cost``): output tokens for a streamed run, input tokens and items for a pooling run
(embeddings, rerank), or how to give a price when there is none."""

from __future__ import annotations

from loadgen.analysis.cost import COST_LABEL, COUNT_LABEL, FORMULA
from loadgen.report.blocks import Section, Table, Text, money, num


def cost_section(cost: dict | None) -> Section:
    if cost is None:
        return Section(
            "Cost",
            (
                Text(
                    f"Not computed: give the price of a GPU-hour (loadgen report --gpu-hour-cost USD, or "
                    f"--label {COST_LABEL}=USD when running) and the GPU count ({COUNT_LABEL} label or "
                    "--gpu-count, default 1)."
                ),
            ),
        )
    src = cost["source"]
    rate = cost["throughput"]
    if "items_per_s" in rate:  # embeddings, rerank: no output tokens to price
        pooled = (
            ("input tokens", num(rate["input_tokens_per_s"]), money(cost["usd_per_million_input_tokens"])),
            ("items (inputs, documents)", num(rate["items_per_s"]), money(cost["usd_per_million_items"])),
        )
        return _cost(cost, src, pooled, ("delivered", "per second", "$ per million"), "")
    rows = (
        ("output tokens", num(rate["output_tokens_per_s"]), money(cost["usd_per_million_output_tokens"])),
        (
            "total tokens (input + output)",
            num(rate["total_tokens_per_s"]),
            money(cost["usd_per_million_total_tokens"]),
        ),
        (
            "output tokens at goodput",
            num(rate["goodput_output_tokens_per_s"]),
            money(cost["usd_per_million_output_tokens_at_goodput"]),
        ),
    )
    header = ("tokens", "tokens/s", "$ per million tokens")
    return _cost(
        cost,
        src,
        rows,
        header,
        " At goodput, only output of requests that met every SLO counts as delivered.",
    )


def _cost(cost: dict, src: dict, rows: tuple, header: tuple[str, ...], note: str) -> Section:
    return Section(
        "Cost",
        (
            Text(
                f"{money(cost['gpu_hour_cost_usd'])} per GPU-hour ({src[COST_LABEL]}) x "
                f"{cost['gpu_count']:g} GPU{'' if cost['gpu_count'] == 1 else 's'} ({src[COUNT_LABEL]}) = "
                f"{money(cost['usd_per_hour'])} per hour."
            ),
            Table(header, rows, "lrr"),
            Text(f"{FORMULA}.{note}"),
            *_energy_cost(cost),
        ),
    )


def _energy_cost(cost: dict) -> tuple[Text, ...]:
    """The electricity beside the GPU-hour, when the run read GPU energy and had a kWh price."""
    e = cost.get("energy")
    if not e:
        return ()
    return (
        Text(
            f"Electricity at {money(e['price_per_kwh'])} per kWh (telemetry.price_per_kwh), from the GPUs' "
            f"measured energy: {money(e['usd_per_million_output_tokens'])} per million output tokens, "
            f"{money(e['usd_per_million_total_tokens'])} per million total tokens."
        ),
    )
