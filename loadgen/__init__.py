"""loadgen: load-testing and benchmarking for LLM inference servers.

Public API:
    run(profile) -> RunResult          run a profile (a Profile, or a path to a YAML file)
    load_run(path) -> DataFrame        per-request records of a saved run, with derived columns
    load_summary(path) -> dict         summary.json of a saved run (schema-checked)
    compare(paths) -> Comparison       saved runs side by side: .table / .relative DataFrames,
                                       .conditions (every differing field), .warnings
    gate(candidate, baseline, rules)   a CI verdict with bootstrap intervals -> GateResult

The package's folders follow the data flow: config -> workload -> runner -> backends ->
records -> analysis -> report, with server/ (the target's own view), sim/ (the built-in
simulator, the system under test) and testing/ (scripted servers) beside it.
"""

__version__ = "0.1.0"

from loadgen.errors import ConfigError, LoadgenError
from loadgen.records import RequestRecord

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
