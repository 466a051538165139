"""loadgen: load-testing and benchmarking for LLM inference servers.

Public API:
    run(profile) -> RunResult          run a profile (a Profile, or a path to a YAML file)
    load_run(path) -> DataFrame        per-request records of a saved run, with derived columns
    load_summary(path) -> dict         summary.json of a saved run (schema-checked)
    compare(paths) -> Comparison       saved runs side by side: .table / .relative DataFrames,
                                       .conditions (every differing field), .warnings
"""

__version__ = "0.1.0"

from loadgen.records import RequestRecord  # noqa: E402

__all__ = ["__version__", "RequestRecord", "run", "run_async", "load_run", "load_summary", "RunResult",
           "compare"]


def __getattr__(name: str):
    # Lazy: `import loadgen` stays cheap (the simulator subprocess and the CLI import it).
    if name in ("run", "run_async"):
        from loadgen import api
        return getattr(api, name)
    if name in ("load_run", "load_summary", "RunResult"):
        from loadgen import result
        return getattr(result, name)
    if name == "compare":
        from loadgen.comparison import compare
        return compare
    raise AttributeError(f"module 'loadgen' has no attribute {name!r}")
