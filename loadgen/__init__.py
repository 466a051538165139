"""loadgen: load-testing and benchmarking for LLM inference servers.

Public API:
    run(profile) -> RunResult          run a profile (a Profile, or a path to a YAML file)
    load_run(path) -> DataFrame        per-request records of a saved run, with derived columns
    load_summary(path) -> dict         summary.json of a saved run (schema-checked)
    compare(paths) -> Comparison       saved runs side by side: .table / .relative DataFrames,
                                       .conditions (every differing field), .warnings
    gate(candidate, baseline, rules)   a CI verdict with bootstrap intervals -> GateResult

The package's folders follow the data flow: config -> workload -> runner -> backends ->
records -> analysis -> report, with cli/ and experiment/ on top (the commands; grids of runs),
server/ (the target's own view: /metrics, telemetry), live/ (the live view while a run goes),
quality/ (answers scored), summary/ and metric_defs/ (the result's types and the metric
registry), sim/ (the built-in simulator, the system under test) and testing/ (scripted and
hostile servers) beside it. docs/design.md draws the layers; pyproject.toml's import-linter
contracts keep them.
"""

from loadgen.errors import ConfigError, LoadgenError
from loadgen.records import RequestRecord
from loadgen.version import __version__

__all__ = [
    "ConfigError",
    "LoadgenError",
    "RequestRecord",
    "RunResult",
    "__version__",
    "compare",
    "gate",
    "load_run",
    "load_summary",
    "run",
    "run_async",
]


def __getattr__(name: str):
    # Lazy: `import loadgen` stays cheap (the simulator subprocess and the CLI import it).
    if name in ("run", "run_async"):
        from loadgen.runner import api

        return getattr(api, name)
    if name in ("load_run", "load_summary", "RunResult"):
        from loadgen import result

        return getattr(result, name)
    if name == "compare":
        from loadgen.analysis.compare import compare

        return compare
    if name == "gate":
        from loadgen.analysis.gate import gate

        return gate
    raise AttributeError(f"module 'loadgen' has no attribute {name!r}")
