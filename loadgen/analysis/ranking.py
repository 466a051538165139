"""An experiment's ranking: each configuration's figures at the SLA, over its repeats, in order.

A repeat's capacity at the SLA (the rule):
  - a capacity search: its ``capacity_rps`` (the highest level whose pooled attainment met A);
  - a sweep or staged run: the throughput where the stages' attainment (the fraction of
    requests meeting every per-request SLO) crosses A, interpolated linearly between the last
    stage that met it and the first that did not, in attainment, and read on the measured
    throughput (req/s): the load the server *served* at the SLA, whichever knob drove it. When
    every stage met A it is the last stage's throughput, a lower bound ("at top"); when none
    did, there is none. A stage without per-request attainment (another tool's results) passes
    when each SLO metric's percentile at A is within its bound, and the crossing is then the
    last passing stage.
Goodput and output tokens/s at the SLA are read at the same point, cost per million output
tokens from the GPU-hour price (``analysis.cost.per_million``), tokens/s per GPU by the count,
and joules per output token (runs with GPU telemetry) from the stages' energy counters, read at
the same point too (none for a capacity search).

Across repeats each figure has a Student t interval (``analysis.repeats.t_interval``). The
ranking orders configurations by mean capacity; one beats the next only when their intervals
separate (the lower end of one above the upper end of the next); otherwise the two are "not
distinguishable", and the ranking says how many repeats each would need for intervals of the
same spread to separate, or that no affordable number would (the means barely differ).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from loadgen.analysis import curve as curve_mod
from loadgen.analysis.cost import per_million
from loadgen.analysis.repeats import CONFIDENCE, TInterval, t_interval, t_quantile
from loadgen.summary import Summary
from loadgen.summary.experiment import Ranking, RankingFigure, RankingRow, RankingVersus

__all__ = ["FIGURES", "ConfigRuns", "at_sla", "rank", "repeats_to_separate"]

FIGURES: tuple[str, ...] = (
    "capacity_rps",
    "goodput_rps",
    "output_tokens_per_s",
    "usd_per_million_output_tokens",
    "output_tokens_per_s_per_gpu",
    "energy_per_output_token_j",
)
MAX_REPEATS = 100  # beyond this the ranking says the difference is within the noise


@dataclass(frozen=True)
class ConfigRuns:
    """One configuration's finished repeats (their summaries) and its price."""

    id: str
    label: str
    summaries: Sequence[Summary]
    gpu_hour_cost: float | None = None
    gpus: float = 1.0
    planned: int = 0  # repeats planned (0: as many as given)
    notes: tuple[str, ...] = field(default_factory=tuple)


def _energy(block: Mapping[str, Any] | None) -> float | None:
    """Joules per output token of a run's or a stage's telemetry block, when it has one."""
    return (((block or {}).get("telemetry") or {}).get("energy") or {}).get("j_per_output_token")


def _points(summary: Summary) -> list[dict[str, Any]]:
    s: Any = summary
    points = (s.get("curve") or {}).get("points")
    if points is None and s.get("stages"):
        points = curve_mod.curve(s["stages"])["points"]
    if points is not None:  # each stage's energy beside its figures (GPU telemetry runs)
        energy = {st["index"]: _energy(st) for st in s.get("stages") or []}
        points = [{**p, "j_per_output_token": energy.get(p["stage"])} for p in points]
    if points is None:
        m = s.get("metrics") or {}
        good = m.get("goodput") or {}
        points = [
            {
                "stage": 0,
                "name": "run",
                "offered": None,
                "throughput_rps": m.get("request_throughput_rps"),
                "output_tokens_per_s": m.get("output_tokens_per_s"),
                "goodput_rps": good.get("requests_per_s"),
                "attained_fraction": good.get("attained_fraction"),
                "j_per_output_token": _energy(s),
                **{d: m.get(d) for d in curve_mod.CURVE_METRICS},
            }
        ]
    return sorted(points, key=lambda p: (p.get("offered") is None, p.get("offered") or 0, p["stage"]))


def _attained(point: Mapping[str, Any], attainment: float, slos: Mapping[str, float]) -> float | None:
    """The point's attainment, or 1/0 from its percentiles when it has none (other tools)."""
    if point.get("attained_fraction") is not None:
        return float(point["attained_fraction"])
    stat = f"p{round(attainment * 100):d}"
    values = [((point.get(m) or {}).get(stat), bound) for m, bound in slos.items()]
    if any(v is None for v, _ in values):
        return None
    return 1.0 if all(float(cast(float, v)) <= bound for v, bound in values) else 0.0


def at_sla(summary: Summary, attainment: float, slos: Mapping[str, float]) -> dict[str, Any]:
    """One repeat's capacity, goodput and output tokens/s at the SLA, and how they were found."""
    s: Any = summary
    cap = s.get("capacity")
    if cap is not None:
        return {
            "capacity_rps": cap.get("capacity_rps"),
            "goodput_rps": cap.get("goodput_rps"),
            "output_tokens_per_s": cap.get("output_tokens_per_s"),
            "energy_per_output_token_j": None,
            "basis": "capacity search",
        }
    points = [p for p in _points(summary) if p.get("throughput_rps") is not None]
    flags = [_attained(p, attainment, slos) for p in points]
    none = {
        "capacity_rps": None,
        "goodput_rps": None,
        "output_tokens_per_s": None,
        "energy_per_output_token_j": None,
    }
    if not points or flags[0] is None:
        return {**none, "basis": "no attainment measured"}
    if flags[0] < attainment:
        return {**none, "basis": "below the first stage"}
    last = 0
    for i, a in enumerate(flags):
        if a is None or a < attainment:
            break
        last = i
    else:
        p = points[-1]
        return {**_read(p, p, 0.0), "basis": "at top (every stage met the SLA: a lower bound)"}
    a0, a1 = flags[last], flags[last + 1]
    pair = (points[last], points[last + 1])
    if a1 is None or a0 is None or a0 == a1 or any(p.get("attained_fraction") is None for p in pair):
        return {**_read(points[last], points[last], 0.0), "basis": "highest passing stage"}
    return {**_read(points[last], points[last + 1], (a0 - attainment) / (a0 - a1)), "basis": "crossing"}


def _read(p0: Mapping[str, Any], p1: Mapping[str, Any], f: float) -> dict[str, float | None]:
    def lerp(key: str) -> float | None:
        x0, x1 = p0.get(key), p1.get(key)
        return None if x0 is None or x1 is None else float(x0) + f * (float(x1) - float(x0))

    return {
        "capacity_rps": lerp("throughput_rps"),
        "goodput_rps": lerp("goodput_rps"),
        "output_tokens_per_s": lerp("output_tokens_per_s"),
        "energy_per_output_token_j": lerp("j_per_output_token"),
    }


def repeats_to_separate(a: TInterval, b: TInterval, confidence: float = CONFIDENCE) -> int | None:
    """Repeats each of two configurations would need for their intervals to separate at the
    spreads measured, or None: no spread measured yet, or more than ``MAX_REPEATS``."""
    if a.mean is None or b.mean is None or a.sd is None or b.sd is None:
        return None
    d = abs(a.mean - b.mean)
    spread = a.sd + b.sd
    for n in range(2, MAX_REPEATS + 1):
        if d > t_quantile(1 - (1 - confidence) / 2, n - 1) * spread / math.sqrt(n):
            return n
    return None


def rank(
    configs: Sequence[ConfigRuns],
    attainment: float,
    slos: Mapping[str, float],
    confidence: float = CONFIDENCE,
) -> Ranking:
    """The ranking block of experiment.json (see the module's docstring)."""
    rows: list[RankingRow] = []
    for c in configs:
        per = [at_sla(s, attainment, slos) for s in c.summaries]
        for r in per:
            tok = r["output_tokens_per_s"]
            r["usd_per_million_output_tokens"] = (
                None if c.gpu_hour_cost is None or tok is None else per_million(c.gpu_hour_cost * c.gpus, tok)
            )
            r["output_tokens_per_s_per_gpu"] = None if tok is None else tok / c.gpus
        figures: dict[str, RankingFigure] = {}
        for name in FIGURES:
            values = [r[name] for r in per]
            iv = t_interval(values, confidence)
            figures[name] = RankingFigure(
                values=values, n=iv.n, mean=iv.mean, sd=iv.sd, low=iv.low, high=iv.high
            )
        rows.append(
            RankingRow(
                config=c.id,
                label=c.label,
                repeats=len(per),
                planned=c.planned or len(per),
                bases=sorted({r["basis"] for r in per}),
                gpu_hour_cost=c.gpu_hour_cost,
                gpus=c.gpus,
                figures=figures,
                notes=list(c.notes),
                rank=None,
                versus_next=None,
            )
        )
    rows.sort(key=lambda r: -(r["figures"]["capacity_rps"]["mean"] or -1.0))
    # A configuration none of whose repeats finished (each failed: refused, crashed, served
    # nothing) has no figure to rank: listed last, unranked, never "not distinguishable" from
    # another that failed too.
    ranked = [r for r in rows if r["repeats"]]
    for i, row in enumerate(ranked):
        row["rank"] = i + 1
        row["versus_next"] = _versus(row, ranked[i + 1], confidence) if i + 1 < len(ranked) else None
    unranked = [r for r in rows if not r["repeats"]]
    for row in unranked:
        row["rank"] = None
        row["versus_next"] = None
    rows = ranked + unranked
    return {
        "metric": "capacity_rps",
        "sla": dict(slos),
        "attainment": attainment,
        "confidence": confidence,
        "rule": "capacity at the SLA per repeat (capacity search, or the sweep's interpolated crossing of "
        "the attainment on measured throughput); mean with a Student t interval over repeats; a "
        "configuration beats the next only when their intervals separate",
        "rows": rows,
    }


def _versus(a: RankingRow, b: RankingRow, confidence: float) -> RankingVersus:
    fa, fb = a["figures"]["capacity_rps"], b["figures"]["capacity_rps"]
    ia, ib = (TInterval(f["n"], f["mean"], f["sd"], f["low"], f["high"]) for f in (fa, fb))
    if ia.mean is not None and ib.mean is None:
        return {
            "distinguishable": True,
            "repeats_needed": None,
            "text": "the next has no capacity at the SLA",
        }
    separated = None not in (ia.low, ib.high) and ia.low > ib.high  # type: ignore[operator]
    if separated:
        return {"distinguishable": True, "repeats_needed": None, "text": "intervals separate"}
    need = repeats_to_separate(ia, ib, confidence)
    if ia.n < 2 or ib.n < 2:
        why = "one repeat has no interval: run at least 2 (3 or more to separate close configurations)"
    elif need is None:
        why = f"no number of repeats up to {MAX_REPEATS} would separate them at this spread"
    else:
        why = f"about {need} repeats each would separate them at this spread"
    return {
        "distinguishable": False,
        "repeats_needed": need,
        "text": f"not distinguishable from the next; {why}",
    }
