"""The command line's arguments: every subcommand, its flags and their help text, one function
per command (``run``'s in ``run_flags.py``, ``capacity``'s and ``selfcheck``'s beside their
commands). Parsing only; ``main.py`` acts on the result, ``overrides.py`` says what the ``run``
flags change in the profile."""

from __future__ import annotations

import argparse
from typing import Any

from loadgen.cli.argtypes import duration, parse_sla
from loadgen.cli.capacity import add_parser as add_capacity
from loadgen.cli.experiment import add_parser as add_experiment
from loadgen.cli.overrides import FLAG_PATHS, overrides
from loadgen.cli.records import add_parser as add_records
from loadgen.cli.run_flags import add_parser as add_run
from loadgen.cli.selfcheck import add_parser as add_selfcheck
from loadgen.cli.sim_fit import add_parser as add_fit

# Re-exported: the flag types and the run flags' profile changes were defined here first.
__all__ = ["FLAG_PATHS", "build_parser", "duration", "overrides", "parse_sla"]


class _Version(argparse.Action):
    """``--version``: the release, and for a source install the checkout's commit (asked of git
    only when the flag is given, not each time the parser is built)."""

    def __init__(self, option_strings: list[str], dest: str, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print loadgen's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from loadgen.runner.conditions import git_commit
        from loadgen.version import __version__

        commit = git_commit()
        parser.exit(message=f"loadgen {__version__}" + (f" (git {commit})" if commit else "") + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``loadgen`` parser: one subcommand per command, each documented by ``--help``."""
    p = argparse.ArgumentParser(prog="loadgen", description="Load-test and benchmark LLM inference servers.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="what to do; `loadgen COMMAND --help` documents each",
    )
    run = add_run(sub)
    _sim(sub)
    _report(sub)
    _compare(sub)
    _gate(sub)
    add_capacity(sub, run)  # capacity and selfcheck borrow some of run's flags
    add_selfcheck(sub, run)
    add_experiment(sub)
    add_records(sub)
    _profiles(sub)
    return p


def _sim(sub: Any) -> None:
    """``loadgen sim``: serve the simulator for any client."""
    s = sub.add_parser(
        "sim",
        help="serve the built-in GPU-serving simulator",
        description="Serve the simulator as an OpenAI-compatible server for any client.",
    )
    s.add_argument("--preset", help="<model>-<precision>@<gpu> (default: llama3-8b-fp16@h100)")
    s.add_argument(
        "--preset-file",
        help="a preset file (YAML of simulator fields, as `loadgen sim fit` writes): serve that twin",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on")
    s.add_argument("--port", type=int, default=8000, help="port to listen on")
    s.add_argument("--time-scale", type=float, help="simulated-time pacing factor (see docs/simulator.md)")
    s.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any simulator setting, e.g. --set max_num_seqs=64 (repeatable)",
    )
    s.add_argument(
        "--grpc-port",
        type=int,
        help="also serve Triton's KServe v2 gRPC frontend (ModelStreamInfer) on this port, for "
        "--endpoint triton_grpc (needs loadgen[grpc])",
    )
    s.add_argument("--ground-truth", help="write the per-request ground-truth log (JSONL) here")
    add_fit(s.add_subparsers(dest="sim_command", metavar="fit", help="fit the simulator to a measured sweep"))


def _report(sub: Any) -> None:
    """``loadgen report``: a saved run's report files."""
    rp = sub.add_parser(
        "report",
        help="write report.md, report.html, plots and CSV/Parquet of a saved run",
        description="Regenerate a saved run's reports (no server needed): report.md, a "
        "self-contained report.html, plots/*.png, requests.csv, requests.parquet, and "
        "cost.json when a GPU price is known. Given an experiment's folder (it holds experiment.json), "
        "its experiment.md, experiment.html and plots.",
    )
    rp.add_argument("run_dir", help="a run directory, e.g. reports/<run-id> (or an experiment's folder)")
    rp.add_argument("-o", "--out", help="write the report files here (default: the run directory)")
    rp.add_argument(
        "--gpu-hour-cost",
        type=float,
        metavar="USD",
        help="price of one GPU-hour, for $ per million tokens (default: the run's gpu_hour_cost label)",
    )
    rp.add_argument(
        "--gpu-count",
        type=float,
        metavar="N",
        help="GPUs serving the model (default: the run's gpu_count label, else 1)",
    )


def _compare(sub: Any) -> None:
    """``loadgen compare``: saved runs side by side."""
    c = sub.add_parser(
        "compare",
        help="compare saved runs side by side (metrics, conditions, CDFs)",
        description="Compare saved runs (no server needed): every metric side by side "
        "with its difference relative to the first run, every condition in which the "
        "runs differ, and overlaid CDFs. Writes compare.md, compare.json and "
        "cdf_*.png into the output directory. A RUN may also be a result file (or its folder) "
        "of vLLM's bench serve (--save-result), GuideLLM (benchmarks.json), AIPerf "
        "(profile_export_aiperf.json) or inference-perf (summary_lifecycle_metrics.json): its "
        "numbers sit beside loadgen's, with the definitions that differ stated.",
    )
    c.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run directories or other tools' result files (the first is the reference)",
    )
    c.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")


def _gate(sub: Any) -> None:
    """``loadgen gate``: a candidate run against a baseline under rules."""
    gt = sub.add_parser(
        "gate",
        help="fail CI when a run regressed against a baseline beyond noise",
        description="Check a candidate run against a baseline under a rules file. A rule "
        "fails only when the whole bootstrap confidence interval lies beyond its bound. "
        "Exit 0 pass, 1 regression, 2 runs not comparable or bad input.",
    )
    gt.add_argument("candidate", metavar="CANDIDATE", help="the run under test (a run directory)")
    gt.add_argument("--baseline", required=True, metavar="BASE", help="the run to compare against")
    gt.add_argument(
        "--rules",
        metavar="PATH",
        help="rules YAML (default: the shipped gate.yaml; `loadgen profiles` lists it)",
    )
    gt.add_argument("--junit", metavar="PATH", help="write a JUnit XML report here (one testcase per rule)")
    gt.add_argument(
        "--markdown",
        metavar="PATH",
        help="write the Markdown summary here too (e.g. for $GITHUB_STEP_SUMMARY)",
    )
    gt.add_argument("--json", metavar="PATH", help="write the full result as JSON here")
    gt.add_argument(
        "--cell",
        metavar="CONFIG",
        help="CANDIDATE and BASE are experiment folders: gate this configuration (its folder name in "
        "experiment.json, e.g. sim--gpu=h100--precision=fp16, or CONFIG/repeat-2 for one repeat) of "
        "one against the same of the other",
    )
    gt.add_argument(
        "--resamples",
        type=int,
        metavar="N",
        help="bootstrap resamples per rule (default: the rules file's, 2000)",
    )
    gt.add_argument("--seed", type=int, metavar="N", help="bootstrap seed (default: the rules file's, 0)")
    gt.add_argument(
        "--allow-different",
        action="store_true",
        help="gate even when the workload, model or endpoint differ (they are still listed)",
    )
    gt.add_argument(
        "--strict-conditions",
        action="store_true",
        help="fail (exit 1) when compare would warn about either run: client-limited, a failed "
        "fidelity check, workloads that differ, interrupted",
    )


def _profiles(sub: Any) -> None:
    """``loadgen profiles``: the shipped profiles."""
    sub.add_parser(
        "profiles",
        help="list the shipped profiles (run one with `loadgen run NAME`)",
        description="List the profiles installed with loadgen, one line each: the name "
        "`loadgen run NAME` accepts from any folder, and what the profile models.",
    )
