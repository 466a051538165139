"""The calibration table: public measurements the simulator is held against, and what it says of them.

``calibration.yaml`` (beside this module) holds each measurement exactly as its source states it
(engine, GPU, model, precision, prompt and answer lengths, concurrency, the figure) together with
the simulator's prediction for it and the band the prediction must stay in. ``predict`` computes a
row's prediction again from the simulator's own engine in virtual time, so a change to the
physics or the scheduler that moves a row shows up in ``tests/sim/test_calibration.py``;
``status`` says which rows cover a run (its model, precision, GPU and engine: ``Twin``), so every
simulator run can say how far to trust it. docs/simulator.md ("Calibration") renders the same
table with its sources.

A row is served as its source ran it: ``requests`` requests of ``input_tokens`` prompt tokens
and exactly ``output_tokens`` answer tokens, at most ``concurrency`` in flight (a new one is
sent the moment one finishes, as ``vllm bench serve --max-concurrency`` and a static batch do;
``concurrency == requests`` queues them all at once, as an offline throughput run does).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from .config import SimConfig
from .virtual_time import serve_closed_loop

# What a row can check: mean TTFT and TPOT (ms), output tokens per second over the whole run,
# and the ratio of that throughput to the same workload's at ``baseline_concurrency``.
METRICS = ("ttft_ms", "tpot_ms", "output_tokens_per_s", "throughput_ratio")

# The efficiencies every row is predicted with (SimConfig's defaults): a run that overrides
# them is no longer the simulator the table measured.
_EFFICIENCY_FIELDS = ("bandwidth_efficiency", "flops_efficiency", "step_overhead_ms")


@dataclass(frozen=True)
class Row:
    """One public measurement, its conditions, and the simulator's recorded prediction for it."""

    id: str
    engine: str  # vllm, sglang or tensorrt-llm
    source: str  # where the figure is published (URL)
    conditions: str  # what the source states it ran: version, GPU, model, precision, tool
    preset: str  # the simulator's twin of that GPU, model and precision
    input_tokens: int
    output_tokens: int
    concurrency: int
    requests: int
    metric: str  # one of METRICS
    measured: float  # the figure exactly as the source states it
    predicted: float  # the simulator's prediction when the table was last written
    band_pct: float  # the prediction must stay within measured x (1 +- band_pct / 100)
    missing: str | None = None  # the mechanism that explains a band wider than the aim
    sim: dict[str, Any] = field(default_factory=dict)  # the engine's stated limits (max_num_seqs)
    baseline_concurrency: int | None = None  # throughput_ratio only: the denominator's run
    baseline_requests: int | None = None

    @property
    def error_pct(self) -> float:
        """(predicted - measured) / measured, in percent: negative when the simulator is low."""
        return (self.predicted - self.measured) / self.measured * 100.0

    def config(self) -> SimConfig:
        return SimConfig.from_dict({"preset": self.preset, "time_scale": 0, **self.sim})


@functools.cache
def rows() -> tuple[Row, ...]:
    """Every row of the shipped table, in its order."""
    text = resources.files(__package__).joinpath("calibration.yaml").read_text(encoding="utf-8")
    return tuple(Row(**r) for r in yaml.safe_load(text)["rows"])


def predict(row: Row) -> float:
    """The simulator's figure for ``row``, computed now (not the recorded ``row.predicted``)."""
    config = row.config()
    run = serve_closed_loop(config, row.input_tokens, row.output_tokens, row.concurrency, row.requests)
    if row.metric == "throughput_ratio":
        assert row.baseline_concurrency is not None and row.baseline_requests is not None
        base = serve_closed_loop(
            config, row.input_tokens, row.output_tokens, row.baseline_concurrency, row.baseline_requests
        )
        return run.output_tokens_per_s / base.output_tokens_per_s
    value: float = getattr(run, row.metric)
    return value


# How a simulated engine takes KV blocks and schedules prefills: what sets one engine's scheduler
# apart from another's in the simulator (a row's ``sim:`` states its engine's), as against the
# limits (max_num_seqs, the step budget) a run tunes.
ENGINE_FIELDS = ("kv_allocation", "scheduling")


@dataclass(frozen=True)
class Twin:
    """What a row must share with a run to vouch for it: the model, the weight and KV-cache
    precision, the GPU, and the engine's scheduler (``ENGINE_FIELDS``). The simulator is no one
    engine: it stands for the engine whose scheduler its settings reproduce, so a row measured on
    FP8 TensorRT-LLM says nothing of an FP16 run, nor of a run that preempts where it reserved."""

    model: str
    precision: str
    kv_precision: str
    gpu: str
    scheduler: tuple[str, ...]

    @classmethod
    def of(cls, config: SimConfig) -> Twin:
        p = config.parsed
        kv = config.kv_precision or p.kv_precision or p.precision
        return cls(
            p.model.key, p.precision, kv, p.gpu.key, tuple(str(getattr(config, f)) for f in ENGINE_FIELDS)
        )

    def words(self) -> str:
        """``llama3-8b fp8 on h100`` (with ``KV fp8`` when it is not the weights')."""
        kv = "" if self.kv_precision == self.precision else f" (KV {self.kv_precision})"
        return f"{self.model} {self.precision}{kv} on {self.gpu}"

    def scheduler_words(self) -> str:
        return ", ".join(f"{f} {v}" for f, v in zip(ENGINE_FIELDS, self.scheduler))


def covering_rows(config: SimConfig) -> list[Row]:
    """The rows of ``config``'s own model, precision, GPU and engine (``Twin``), in table order."""
    twin = Twin.of(config)
    return [r for r in rows() if Twin.of(r.config()) == twin]


def status(config: SimConfig) -> dict[str, Any]:
    """How far the table vouches for ``config``: the rows of its own twin (``Twin``: model,
    precision, GPU, engine), each with its error, or "uncalibrated" when none is, naming the rows
    of the same model and GPU that are not its own, so a reader sees why. Rows were predicted
    with the default efficiencies; a config that overrides them is told so."""
    twin = Twin.of(config)
    covering = covering_rows(config)
    overridden = [
        f"{f}={getattr(config, f)}"
        for f in _EFFICIENCY_FIELDS
        if getattr(config, f) != SimConfig.model_fields[f].default
    ]
    state = "calibrated" if covering and not overridden else "uncalibrated"
    if covering:
        engines = "/".join(sorted({r.engine for r in covering}))
        errors = ", ".join(f"{r.id} {r.error_pct:+.1f} %" for r in covering)
        summary = (
            f"{state}: {len(covering)} row(s) of the calibration table cover {twin.words()} as "
            f"{engines} ran it ({twin.scheduler_words()}): {errors}"
        )
    else:
        summary = f"{state}: no row of the calibration table covers {twin.words()} ({twin.scheduler_words()})"
        near = [(r, Twin.of(r.config())) for r in rows()]
        near = [(r, t) for r, t in near if (t.model, t.gpu) == (twin.model, twin.gpu)]
        if near:
            twins = sorted({f"{r.engine} {t.words()} ({t.scheduler_words()})" for r, t in near})
            summary += (
                f"; {len(near)} row(s) of {twin.model} on {twin.gpu} are another twin's: {'; '.join(twins)}"
            )
    if overridden:
        summary += (
            f"; this run sets {', '.join(overridden)}, so the rows (predicted with the defaults) do not apply"
        )
    out: dict[str, Any] = {
        "status": state,
        "summary": summary,
        "table": "docs/simulator.md#calibration",
        "rows": [
            {
                "id": r.id,
                "engine": r.engine,
                "preset": r.preset,
                "metric": r.metric,
                "measured": r.measured,
                "predicted": r.predicted,
                "error_pct": round(r.error_pct, 1),
                "band_pct": r.band_pct,
            }
            for r in covering
        ],
    }
    return out


# --- the table as docs/simulator.md shows it ---------------------------------------------------

_SOURCE_NAMES = {
    "performance.md": "TRT-LLM performance.md",
    "perf-overview.md": "TRT-LLM perf overview",
    "vllm-throughput-latency-sweep-on": "vLLM sweep on A100 (J. Musgrave)",
}
_METRIC_NAMES = {"ttft_ms": "TTFT ms", "tpot_ms": "TPOT ms", "output_tokens_per_s": "output tok/s"}


def _figure(v: float) -> str:
    """Three significant figures, thousands separated: 7.00, 13.3, 185, 6,903."""
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _line(r: Row) -> str:
    name = _SOURCE_NAMES.get(r.source.rstrip("/").rsplit("/", 1)[-1], r.source)
    preset = ", ".join([f"`{r.preset}`", *(f"`{k}: {v}`" for k, v in r.sim.items())])
    if r.metric == "throughput_ratio":
        shape = f"c={r.concurrency} vs c={r.baseline_concurrency}, {r.requests} requests"
        metric = f"tok/s c={r.concurrency} / c={r.baseline_concurrency}"
    else:
        shape = f"c={r.concurrency}" + (f", {r.requests} requests" if r.requests != r.concurrency else "")
        metric = _METRIC_NAMES[r.metric]
    mark = " ¹" if r.missing else ""
    return (
        f"| `{r.id}` | [{name}]({r.source}) | {r.conditions} | {preset} | {r.input_tokens} / "
        f"{r.output_tokens}, {shape} | {metric} | {_figure(r.measured)} | {_figure(r.predicted)} | "
        f"{r.error_pct:+.1f} % | ±{r.band_pct:g} %{mark} |"
    )


def markdown_table() -> str:
    """docs/simulator.md's calibration table and its footnote, from the rows (the docs test
    compares them; ``python -m loadgen.sim.calibration`` prints them to paste)."""
    lines = [
        "| row | source | conditions (as the source states them) | simulator preset | ISL / OSL, "
        "concurrency | metric | measured | predicted | error | band |",
        "| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
        *(_line(r) for r in rows()),
        "",
        "¹ A band wider than the aim; the mechanism the simulator lacks:",
        "",
        *(f"- `{r.id}`: {r.missing}" for r in rows() if r.missing),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
