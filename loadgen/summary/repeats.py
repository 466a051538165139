"""The repeats block: a run of ``--repeats N`` (``load.repeats``), its repeats and its headline
figures over them, each with a between-repeat interval (``loadgen.analysis.repeats``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, with_config
from typing_extensions import TypedDict

from loadgen.summary.common import DOCS


@with_config(DOCS)
class RepeatRun(TypedDict, total=True):
    """one repeat: a complete run in a folder of its own inside this run's"""

    index: Annotated[int, Field(ge=1)]
    """1 for the first repeat"""
    path: str
    """its folder, relative to this run's (repeat-1, repeat-2, ...): `loadgen report` and `gate` take it
    as any run folder"""
    complete: bool
    """it sent everything its limits asked for"""


@with_config(DOCS)
class RepeatFigure(TypedDict, total=True):
    """one headline figure over the repeats"""

    figure: str
    """the figure as a gate rule names it: 'p99 ttft_ms', 'output_tokens_per_s'"""
    metric: str
    """the registry's metric (metric_defs)"""
    stat: str | None
    """the stat of a distribution (p50, p99); null for a run-level number"""
    values: list[float | None]
    """each repeat's own value, in the order of `runs` (null where that repeat had none)"""
    n: Annotated[int, Field(ge=0)]
    """repeats with a value"""
    mean: float | None
    """mean of the repeats' values"""
    sd: float | None
    """their sample standard deviation (ddof=1); null below 2 repeats"""
    low: float | None
    """lower end of the between-repeat interval of the mean (Student t, n - 1 degrees of freedom); null
    below 2 repeats"""
    high: float | None
    """upper end of that interval"""


@with_config(DOCS)
class Repeats(TypedDict, total=True):
    """a run of the same load repeated (load.repeats, --repeats N): same profile and seed, so the same
    schedule, prompts and lengths; fresh connections, a fresh simulator when it served, and the server's
    reset hook first when target.reset_path is set; the repeats differ only by the server's (and the
    machine's) run-to-run noise. This run's own counts and metrics pool every repeat's measured requests
    (its requests.jsonl holds them all, repeat after repeat); its window's seconds are the sum of the
    repeats' windows, so its rates are per second of load, the gaps between repeats excluded"""

    count: Annotated[int, Field(ge=1)]
    """repeats asked for"""
    completed: Annotated[int, Field(ge=0)]
    """repeats that ran to their limits"""
    confidence: float
    """confidence of every interval below (0.95)"""
    method: str
    """how the intervals were computed, in words"""
    runs: list[RepeatRun]
    """the repeats, in the order run"""
    figures: list[RepeatFigure]
    """the headline figures (analysis.repeats.HEADLINE; capacity_rps for `loadgen capacity`), each over
    the repeats"""
