"""An experiment file: one workload, one way to load each cell, repeats, and the backends.

    name: levers
    profile: levers-workload.yaml      # a profile path (beside this file) or a shipped name
    set: {workload.seed: 0}            # dotted overrides of the profile, as --set
    load:                              # one of: sweep, stages, capacity
      sweep: {concurrency: [4, 16, 64], stage_duration_s: 4}
    sla: {ttft_ms: 700, tpot_ms: 50}   # per-request SLOs every cell is ranked at
    attainment: 0.99                   # the fraction of requests that must meet them
    repeats: 3
    seed: 0                            # the order's shuffle and repeat r's workload seed (+ r - 1)
    backends:
      - name: sim                      # one of: url, sim, serve, results
        sim: {preset: "llama3-8b-{precision}@{gpu}", max_num_seqs: "{max_num_seqs}"}
        matrix: {gpu: [h100, a100], precision: [fp16, fp8], max_num_seqs: [16, 64]}
        gpu_hour_cost: {gpu: {h100: 3.99, a100: 1.89}}   # or one number
      - name: vllm
        serve: "vllm serve {model} --port {port} --max-num-seqs {max_num_seqs}"
        model: tiny-llama
        ready: /v1/models
        reset: ["POST /reset_prefix_cache"]

Templates are Python format strings: ``{port}``, ``{model}`` and the matrix keys are filled, a
literal brace is doubled (``--config '{{"ttft_ms": 20}}'``); a ``serve:`` command is then split
as a shell would split it (``shlex``), quotes and all, but runs without a shell.

Validated once, here, like a profile: an unknown key or a bad value is a ``ConfigError`` naming
its YAML path and what would be valid; a placeholder that no matrix key fills is one too (a
typo must fail before any server starts, not after an hour of other cells).
"""

from __future__ import annotations

import re
import string
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from loadgen import metric_defs
from loadgen.config import ConfigError
from loadgen.config.base import Int, StrictModel
from loadgen.config.loading import load_yaml
from loadgen.config.messages import render_validation_error
from loadgen.config.target import reset_hook

__all__ = [
    "Backend",
    "CapacityMethod",
    "Experiment",
    "ExperimentLoad",
    "fill",
    "load_experiment",
    "resolve_experiment",
]

KINDS = ("url", "sim", "serve", "results")  # a backend is exactly one of these
BUILTIN_FIELDS = ("port", "model")  # placeholders filled without a matrix key
Scalar = str | int | float | bool


class CapacityMethod(StrictModel):
    """A capacity search per cell (``loadgen capacity``'s flags, same defaults)."""

    start_rate: float | None = Field(None, gt=0)
    max_rate: float | None = Field(None, gt=0)
    stage_duration_s: float = Field(15.0, gt=0)
    warmup_s: float = Field(5.0, ge=0)
    precision: float = Field(0.05, gt=0, lt=1)
    max_stages: Int = Field(14, ge=2)
    budget_s: float | None = Field(None, ge=60)
    # the confirming run's measured seconds (default: the larger of 120 and 0.4 x budget_s)
    confirm_s: float | None = Field(None, ge=5)
    # the preset a real server resembles, fitted to propose the rate to confirm ("off": none)
    twin: str | None = None


class ExperimentLoad(StrictModel):
    """How each cell is loaded: exactly one of a sweep, stages (as a profile's ``load.sweep`` /
    ``load.stages``) or a capacity search. The profile's own load is replaced by it."""

    sweep: dict[str, Any] | None = None
    stages: list[dict[str, Any]] | None = None
    capacity: CapacityMethod | None = None

    @model_validator(mode="after")
    def _one(self) -> ExperimentLoad:
        chosen = [k for k in ("sweep", "stages", "capacity") if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(
                f"set exactly one of sweep, stages or capacity (got {', '.join(chosen) or 'none'}); "
                "e.g. sweep: {concurrency: [4, 16, 64], stage_duration_s: 10}"
            )
        return self

    @property
    def method(self) -> Literal["sweep", "stages", "capacity"]:
        return "sweep" if self.sweep is not None else "stages" if self.stages is not None else "capacity"


class Backend(StrictModel):
    """One competitor: a URL already serving, the built-in simulator, a command that starts a
    server, or the results of an earlier run (a loadgen run folder or another tool's file)."""

    name: str = Field(min_length=1, max_length=60, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    url: str | None = None
    sim: dict[str, Any] | str | None = None
    serve: str | None = None
    results: str | None = None
    model: str | None = None  # the served model name (also {model} in serve)
    matrix: dict[str, list[Scalar]] = Field(default_factory=dict)
    labels: dict[str, Scalar] = Field(default_factory=dict)
    set: dict[str, Any] = Field(default_factory=dict)  # profile overrides for this backend's cells
    env: dict[str, str] = Field(default_factory=dict)  # serve: extra environment
    ready: str = "/v1/models"  # serve: polled until it answers 200
    ready_timeout_s: float = Field(300.0, gt=0)
    stop_grace_s: float = Field(10.0, ge=0)  # SIGTERM, then SIGKILL after this
    reset: list[str] = Field(default_factory=list)  # "POST /reset_prefix_cache", before each cell
    gpu_hour_cost: float | dict[str, dict[str, float]] | None = None
    gpus: float = Field(1.0, gt=0)

    @field_validator("matrix")
    @classmethod
    def _matrix(cls, v: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for key, values in v.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or key in BUILTIN_FIELDS:
                raise ValueError(f"matrix key {key!r}: a name of letters, digits and _ (not port/model)")
            if not values or len(set(map(str, values))) != len(values):
                raise ValueError(f"matrix.{key}: a list of distinct values, e.g. [16, 64]")
        return v

    @field_validator("reset")
    @classmethod
    def _reset(cls, v: list[str]) -> list[str]:
        return [" ".join(reset_hook(hook)) for hook in v]

    @model_validator(mode="after")
    def _kind(self) -> Backend:
        kinds = [k for k in KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                f"backend {self.name!r}: set exactly one of url, sim, serve or results "
                f"(got {', '.join(kinds) or 'none'})"
            )
        if self.results is not None and self.matrix:
            raise ValueError(f"backend {self.name!r}: results cannot have a matrix (it is one saved run)")
        if self.serve is not None and "{port}" not in self.serve:
            raise ValueError(f"backend {self.name!r}: serve must contain {{port}}, the port it is given")
        known = set(self.matrix) | set(BUILTIN_FIELDS)
        for where, text in self.templates():
            for name in placeholders(text):
                if name not in known:
                    raise ValueError(
                        f"backend {self.name!r}: {where} uses {{{name}}}, which no matrix key fills; "
                        f"valid: {', '.join(sorted(known))}"
                    )
        if isinstance(self.gpu_hour_cost, dict):
            for key, prices in self.gpu_hour_cost.items():
                values = {str(x) for x in self.matrix.get(key, [])}
                if not values or values - set(map(str, prices)):
                    raise ValueError(
                        f"backend {self.name!r}: gpu_hour_cost.{key} must price every value of "
                        f"matrix.{key} ({', '.join(sorted(values)) or 'no such matrix key'})"
                    )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) is not None)

    def templates(self) -> list[tuple[str, str]]:
        """(where, text) of every string a matrix point fills."""
        out = [(k, getattr(self, k)) for k in ("url", "serve", "model") if isinstance(getattr(self, k), str)]
        sim = self.sim if isinstance(self.sim, dict) else {"preset": self.sim} if self.sim else {}
        out += [(f"sim.{k}", v) for k, v in sim.items() if isinstance(v, str)]
        out += [(f"set.{k}", v) for k, v in self.set.items() if isinstance(v, str)]
        out += [(f"labels.{k}", v) for k, v in self.labels.items() if isinstance(v, str)]
        out += [(f"env.{k}", v) for k, v in self.env.items()]
        return out


class Experiment(StrictModel):
    """The whole experiment file (see the module's docstring)."""

    name: str = Field(min_length=1, max_length=60, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    profile: str | None = None
    set: dict[str, Any] = Field(default_factory=dict)
    load: ExperimentLoad
    sla: dict[str, float] = Field(min_length=1)  # ttft_ms, tpot_ms, e2e_ms
    attainment: float = Field(0.99, gt=0, le=1)
    repeats: Int = Field(3, ge=1, le=100)
    seed: Int = 0
    backends: list[Backend] = Field(min_length=1)

    @field_validator("sla")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        for k, bound in v.items():
            if k not in metric_defs.SLOS:
                raise ValueError(f"sla.{k}: not a per-request SLO; valid: {', '.join(metric_defs.SLOS)}")
            if not bound > 0:
                raise ValueError(f"sla.{k}: a bound in ms > 0, e.g. 700")
        return v

    @model_validator(mode="after")
    def _names(self) -> Experiment:
        names = [b.name for b in self.backends]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"backend names must differ: {', '.join(dup)} used twice")
        return self


def placeholders(text: str) -> list[str]:
    """The ``{name}`` fields of a template (``{{`` is a literal brace)."""
    try:
        return [f for _, f, _, _ in string.Formatter().parse(text) if f]
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None


def fill(text: str, values: dict[str, Any]) -> str:
    """``text`` with its placeholders filled (every one was checked to have a value)."""
    return text.format(**values)


def typed(text: str) -> Any:
    """A filled template as YAML reads it: ``"64"`` -> 64, ``"true"`` -> True, else the text."""
    return load_yaml(text, "value") if text.strip() else text


def experiments_dir() -> Path:
    """The shipped experiments: the installed copy first, else the checkout's ``experiments/``."""
    installed = resources.files("loadgen") / "_experiments"
    if isinstance(installed, Path) and installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "experiments"


def resolve_experiment(arg: str) -> Path:
    """An experiment argument as a path: a file (or a ``.yaml`` path, whose absence the loader
    reports), else the shipped experiment of that name (``levers``)."""
    given = Path(arg)
    if given.exists() or given.suffix in (".yaml", ".yml"):
        return given
    shipped = experiments_dir() / f"{arg}.yaml"
    if shipped.is_file():
        return shipped
    names = sorted(p.stem for p in experiments_dir().glob("*.yaml") if not p.stem.endswith("-workload"))
    raise ConfigError(
        [f"no such file, and no shipped experiment of that name; shipped: {', '.join(names)}"],
        arg,
        "experiment",
    )


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment file; ``ConfigError`` lists every problem by its path."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(
            [f"cannot read the experiment: {exc.strerror or exc}"], str(p), "experiment"
        ) from None
    data = load_yaml(raw, str(p), "experiment")
    if not isinstance(data, dict):
        raise ConfigError(
            ["the top level must be a mapping (name, load, sla, backends, ...)"], str(p), "experiment"
        )
    return parse(data, str(p))


def parse(data: dict[str, Any], source: str | None = None) -> Experiment:
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(render_validation_error(exc, Experiment), source, "experiment") from None
