"""The calibration table: public measurements the simulator is held against, and what it says of them.

``calibration.yaml`` (beside this module) holds each measurement exactly as its source states it
(engine, GPU, model, precision, prompt and answer lengths, concurrency, the figure) together with
the simulator's prediction for it and the band the prediction must stay in. ``predict`` computes a
row's prediction again from the simulator's own engine in virtual time, so a change to the
physics or the scheduler that moves a row shows up in ``tests/sim/test_calibration.py``;
``status`` says which rows cover a run's GPU and model, so every simulator run can say how far to
trust it. docs/simulator.md ("Calibration") renders the same table with its sources.

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
from .engine import Engine, Seq
from .presets import parse_preset

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


@dataclass(frozen=True)
class Served:
    """A closed-loop run's outcome: mean TTFT and TPOT (ms) and output tokens per second."""

    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float


def serve_closed_loop(config: SimConfig, isl: int, osl: int, concurrency: int, requests: int) -> Served:
    """``requests`` requests of (isl, osl) tokens with at most ``concurrency`` in flight, on the
    engine's virtual clock from t = 0 to the last token."""
    engine = Engine(config)
    seqs: list[Seq] = []

    def send() -> None:
        s = Seq(isl, osl)
        s.token_vns = []
        engine.submit(s)
        seqs.append(s)

    for _ in range(min(concurrency, requests)):
        send()
    while engine.has_work():
        step = engine.step()
        if not step.duration_ns:
            raise ValueError(f"a {isl}+{osl}-token request needs more KV blocks than {config.preset} holds")
        for s in step.emitted:
            assert s.token_vns is not None  # set by send()
            s.token_vns.append(engine.now_ns)
        for _ in step.finished:
            if len(seqs) < requests:
                send()
    times = [s.token_vns or [] for s in seqs]
    ttft = sum(t[0] - s.arrival_vns for s, t in zip(seqs, times)) / len(seqs) / 1e6
    tpot = sum(t[-1] - t[0] for t in times) / len(seqs) / 1e6 / (osl - 1) if osl > 1 else 0.0
    return Served(ttft, tpot, requests * osl / (engine.now_ns / 1e9))


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


def _covers(row: Row, model: str, gpu: str) -> bool:
    p = parse_preset(row.preset)
    return p.model.key == model and p.gpu.key == gpu


def status(config: SimConfig) -> dict[str, Any]:
    """How far the table vouches for ``config``: the rows that cover its GPU and model (any
    precision), each with its error, or "uncalibrated" when none does. Rows were predicted with
    the default efficiencies; a config that overrides them is told so."""
    model, gpu = config.parsed.model.key, config.parsed.gpu.key
    covering = [r for r in rows() if _covers(r, model, gpu)]
    overridden = [
        f"{f}={getattr(config, f)}"
        for f in _EFFICIENCY_FIELDS
        if getattr(config, f) != SimConfig.model_fields[f].default
    ]
    state = "calibrated" if covering and not overridden else "uncalibrated"
    if covering:
        errors = ", ".join(f"{r.id} {r.error_pct:+.1f} %" for r in covering)
        summary = f"{state}: {len(covering)} row(s) of the calibration table cover {model} on {gpu}: {errors}"
    else:
        summary = f"{state}: no row of the calibration table covers {model} on {gpu}"
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
