"""An experiment's cells and the order they run in.

A *configuration* is one backend at one point of its matrix (``vllm[max_num_seqs=64]``); a
*cell* is one repeat of a configuration, one ordinary run folder. The order is interleaved:
round r runs repeat r of every configuration, shuffled with a seed of its own, before any
repeat r + 1. Why: a machine that warms, a server whose caches fill, a neighbour that starts a
job at minute 20: drift lands on every configuration alike instead of on the last ones, and the
between-repeat interval then contains it. Every cell of round r uses workload seed
``seed + r - 1``: the configurations meet the same arrivals and prompts (common random numbers),
and the repeats different ones, so a repeat's spread is the noise a decision has to beat.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field
from typing import Any

from loadgen.errors import ConfigError
from loadgen.experiment.spec import Backend, Experiment, fill, typed

__all__ = ["Cell", "Config", "cells", "configs", "slug"]


@dataclass(frozen=True)
class Config:
    """One backend at one matrix point, with every template filled but ``{port}``."""

    id: str  # its folder: "sim--gpu=h100--precision=fp16"
    label: str  # "sim gpu=h100 precision=fp16"
    backend: Backend
    point: dict[str, Any] = field(default_factory=dict)

    def values(self, port: int | None = None) -> dict[str, Any]:
        out = {**self.point, "model": self.backend.model or ""}
        if port is not None:
            out["port"] = port
        return out

    def filled(self, text: str, port: int | None = None) -> str:
        return fill(text, self.values(port if port is not None else 0))

    @property
    def sim(self) -> dict[str, Any] | None:
        """The simulator section, placeholders filled and typed (``"64"`` -> 64)."""
        raw = self.backend.sim
        if raw is None:
            return None
        raw = {"preset": raw} if isinstance(raw, str) else raw
        return {k: typed(self.filled(v)) if isinstance(v, str) else v for k, v in raw.items()}

    @property
    def labels(self) -> dict[str, Any]:
        out = {k: self.filled(v) if isinstance(v, str) else v for k, v in self.backend.labels.items()}
        return {"backend": self.backend.name, **{k: str(v) for k, v in self.point.items()}, **out}

    @property
    def overrides(self) -> dict[str, Any]:
        return {k: typed(self.filled(v)) if isinstance(v, str) else v for k, v in self.backend.set.items()}

    @property
    def gpu_hour_cost(self) -> float | None:
        cost = self.backend.gpu_hour_cost
        if isinstance(cost, dict):
            key, prices = next(iter(cost.items()))
            return float(prices[str(self.point[key])])
        return cost

    @property
    def gpus(self) -> float:
        return self.backend.gpus


@dataclass(frozen=True)
class Cell:
    """One repeat of one configuration: ``<config.id>/repeat-<r>``."""

    config: Config
    repeat: int

    @property
    def id(self) -> str:
        return f"{self.config.id}/repeat-{self.repeat}"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text).strip("-.") or "cell"


def configs(exp: Experiment) -> list[Config]:
    """Every backend's matrix points, in the file's order (the matrix's last key fastest)."""
    out = []
    for b in exp.backends:
        keys = list(b.matrix)
        for combo in itertools.product(*(b.matrix[k] for k in keys)):
            point = dict(zip(keys, combo))
            parts = [f"{k}={v}" for k, v in point.items()]
            out.append(Config(slug("--".join([b.name, *parts])), " ".join([b.name, *parts]), b, point))
    ids = [c.id for c in out]
    clash = sorted({i for i in ids if ids.count(i) > 1})
    if clash:  # two matrix values that differ only in characters a folder name cannot hold
        raise ConfigError(
            [
                f"configurations share a folder name: {', '.join(clash)}; make the matrix "
                "values differ in letters or digits"
            ],
            what="experiment",
        )
    return out


def cells(exp: Experiment) -> list[Cell]:
    """The run order: round by round, each round a seeded shuffle of the configurations that
    run (a ``results:`` backend is read, not run, so it has no cells)."""
    run = [c for c in configs(exp) if c.backend.results is None]
    order: list[Cell] = []
    for r in range(1, exp.repeats + 1):
        shuffled = list(run)
        random.Random(f"{exp.seed}:{r}").shuffle(shuffled)
        order += [Cell(c, r) for c in shuffled]
    return order
