"""experiment.json's layout, as types: the plan, each cell's state, and the ranking.

The file is rewritten whole after every change (``experiment/state.py``) and read back by
``--resume``, ``loadgen report`` and ``loadgen gate --cell``; these types are what the code
checks itself against and what ``schemas/experiment.schema.json`` is generated from, so a
reader validating the file and the code writing it agree, as with summary.json.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import with_config
from typing_extensions import TypedDict

from loadgen.summary.common import DOCS

CellState = Literal["pending", "running", "done", "failed"]


@with_config(DOCS)
class ExperimentCell(TypedDict, total=True):
    """one cell: a configuration's repeat, and where it stands"""

    config: str
    """the configuration's id"""
    repeat: int
    """the repeat's number, from 1"""
    seed: int
    """the workload seed of this repeat (the experiment's seed + repeat - 1)"""
    state: CellState
    """pending, running (loadgen was killed during it when a resume finds it so), done or failed"""
    run_dir: str | None
    """the cell's run folder; null before it starts"""
    error: str | None
    """why it failed, ending with the last lines of the server's log; null otherwise"""
    attempts: int
    """how many times it was started (a resume runs a cell that was running again)"""
    started_at: str | None
    """when its last attempt started (ISO 8601, UTC)"""
    ended_at: str | None
    """when its last attempt ended (ISO 8601, UTC)"""


@with_config(DOCS)
class ExperimentConfig(TypedDict, total=True):
    """one configuration: a backend at one point of the matrix"""

    id: str
    """its id, the name of its folder (e.g. sim--gpu=h100--precision=fp16)"""
    label: str
    """its name in the ranking"""
    backend: str
    """the backend's name"""
    kind: str
    """how the backend is reached: sim, serve, url or results"""
    point: dict[str, Any]
    """the matrix values of this configuration, as the experiment file gave them"""
    labels: dict[str, Any]
    """the labels every run of it carries"""
    gpu_hour_cost: float | None
    """its GPU-hour price, USD; null without one"""
    gpus: float
    """GPUs it runs on (the price is per GPU)"""
    results: str | None
    """a results: backend's saved runs (read, not run); null for the others"""
    reset: list[str]
    """paths POSTed before each of its cells"""


@with_config(DOCS)
class RankingFigure(TypedDict, total=True):
    """one figure of a configuration over its repeats"""

    values: list[float | None]
    """each repeat's value"""
    n: int
    """repeats with a value"""
    mean: float | None
    """their mean"""
    sd: float | None
    """their standard deviation"""
    low: float | None
    """the Student t interval's low end at the ranking's confidence"""
    high: float | None
    """its high end"""


@with_config(DOCS)
class RankingVersus(TypedDict, total=True):
    """a ranked configuration against the next one down"""

    distinguishable: bool
    """their capacity intervals separate (or the next has no capacity at the SLA)"""
    repeats_needed: int | None
    """about how many repeats each would separate them at this spread; null when none would"""
    text: str
    """the verdict in words"""


@with_config(DOCS)
class RankingRow(TypedDict, total=True):
    """one configuration in the ranking"""

    config: str
    """the configuration's id"""
    label: str
    """its name"""
    repeats: int
    """repeats that finished"""
    planned: int
    """repeats planned"""
    bases: list[str]
    """how each repeat's capacity was read: capacity search, crossing, highest passing stage, ..."""
    gpu_hour_cost: float | None
    """its GPU-hour price, USD"""
    gpus: float
    """GPUs priced"""
    figures: dict[str, RankingFigure]
    """each figure (analysis.ranking.FIGURES: capacity_rps, goodput_rps, output_tokens_per_s,
    usd_per_million_output_tokens, output_tokens_per_s_per_gpu, energy_per_output_token_j)"""
    notes: list[str]
    """what the reader should know of its runs"""
    rank: int | None
    """its place, from 1; null when no repeat finished"""
    versus_next: RankingVersus | None
    """against the next ranked configuration; null for the last and the unranked"""


@with_config(DOCS)
class Ranking(TypedDict, total=True):
    """the configurations ranked by capacity at the SLA"""

    metric: Literal["capacity_rps"]
    """the figure ranked on"""
    sla: dict[str, float]
    """the per-request SLOs, ms"""
    attainment: float
    """the fraction of requests that must meet them"""
    confidence: float
    """the confidence of the intervals"""
    rule: str
    """the ranking's rule in words"""
    rows: list[RankingRow]
    """ranked first, then the configurations with no finished repeat"""


@with_config(DOCS)
class ExperimentFile(TypedDict, total=True):
    """experiment.json: a `loadgen experiment`'s plan, each cell's state, and the ranking"""

    schema: Literal["loadgen-experiment/1"]
    """the file's format and version"""
    id: str
    """the experiment's id (its folder's name)"""
    name: str
    """the experiment's name (the file's name:)"""
    source: str
    """the experiment file, resolved"""
    source_sha256: str
    """its SHA-256: --resume refuses a file that changed since"""
    created_at: str
    """when the experiment was planned (ISO 8601, UTC)"""
    updated_at: str
    """when the file was last written"""
    method: Literal["sweep", "stages", "capacity"]
    """how each cell measures its capacity at the SLA: a capacity search, a sweep or the stages"""
    sla: dict[str, float]
    """the per-request SLOs, ms"""
    attainment: float
    """the fraction of requests that must meet them"""
    repeats: int
    """repeats per configuration"""
    seed: int
    """the first repeat's workload seed"""
    configs: list[ExperimentConfig]
    """every configuration, results: backends included"""
    order: list[str]
    """the cells' ids in the order they run"""
    cells: dict[str, ExperimentCell]
    """each cell by id (CONFIG/repeat-R)"""
    complete: bool
    """every cell is done"""
    ranking: Ranking | None
    """the ranking over the finished cells; null before any"""
