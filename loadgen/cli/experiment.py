"""``loadgen experiment``: its flags and its command (the experiment is ``loadgen.experiment``).

    loadgen experiment experiments/levers.yaml            run it; reports/<experiment-id>/
    loadgen experiment FILE --dry-run                     the cells, their order, the expected time
    loadgen experiment --resume reports/<experiment-id>   run what did not finish, then rank

Exit codes: 0 every cell done, 1 some cell failed (the ranking covers the others), 2 bad input,
130 stopped (resume it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.analysis.repeats import TOO_FEW, bounded
from loadgen.cli import track
from loadgen.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_SLA_FAIL, die, raise_fd_limit
from loadgen.clock import run_loop

if TYPE_CHECKING:
    from loadgen.experiment.estimate import Measured
    from loadgen.experiment.run import PlanLine
    from loadgen.summary.experiment import ExperimentFile
    from loadgen.tracking import ExperimentTracking, Status


def add_parser(sub: Any) -> None:
    ep = sub.add_parser(
        "experiment",
        help="run the same load on competing backends and configurations, and rank them at the SLA",
        description="Run an experiment file: every backend (a URL, a simulator preset, a command that "
        "starts a server, or saved results) at every point of its matrix, each repeat of each in "
        "an interleaved order, then rank the configurations by capacity at the SLA with confidence "
        "intervals. One folder: experiment.json (resumable), experiment.md/.html, one run folder per "
        "cell. Exit 0 all cells done, 1 some failed, 2 bad input, 130 interrupted (--resume it).",
    )
    ep.add_argument("file", nargs="?", help="the experiment YAML, or a shipped one's name (levers)")
    ep.add_argument("--dry-run", action="store_true", help="print the cells, their order and expected time")
    ep.add_argument("--resume", metavar="DIR", help="an experiment folder: run only its unfinished cells")
    ep.add_argument(
        "--out", default="reports", metavar="DIR", help="parent of the experiment folder (default reports)"
    )
    ep.add_argument(
        "--id", dest="experiment_id", metavar="ID", help="the folder's name (default <time>-<name>)"
    )
    ep.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the servers' API key")
    track.add_flags(ep, profile=False)


def cmd_experiment(a: argparse.Namespace) -> int:
    from loadgen.experiment import estimate
    from loadgen.experiment import run as exp_run
    from loadgen.experiment.spec import load_experiment, resolve_experiment
    from loadgen.redact import Scrubber

    if a.file is None and a.resume is None:
        return die("give an experiment file (e.g. experiments/levers.yaml) or --resume DIR")
    api_key = os.environ.get(a.api_key_env) if a.api_key_env else None
    if a.api_key_env and not api_key:
        return die(f"--api-key-env names {a.api_key_env}, which is not set")
    if a.resume:
        exp, source, state = exp_run.resume(Path(a.resume), resolve_experiment(a.file) if a.file else None)
    else:
        source = resolve_experiment(a.file)
        exp = load_experiment(source)
        if a.dry_run:
            return _dry_run(exp, source, None, estimate.earlier_run(Path(a.out), source))
        state = exp_run.start(exp, source, Path(a.out), a.experiment_id)
    if a.dry_run:  # what ran of this experiment is the measurement of what is left
        earlier = estimate.measured(state.data, state.folder) or estimate.earlier_run(
            state.folder.parent, source
        )
        return _dry_run(exp, source, set(state.todo()), earlier)
    print(f"experiment {state.folder}", file=sys.stderr, flush=True)
    tracking = track.experiment_tracking(a, state.folder, state.data, Scrubber(extra=[api_key or ""]))

    def on_done(cell_id: str) -> None:
        if tracking is not None:
            try:
                tracking.cell_done(state.data, cell_id)
            except Exception as exc:  # noqa: BLE001 - tracking never stops the experiment
                track.warn(f"{exc}; cell {cell_id} is logged on --resume {state.folder}")

    async def main() -> exp_run.ExperimentResult:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        return await exp_run.run(
            exp,
            source,
            state,
            api_key=api_key,
            stop=stop,
            status=lambda m: print(f"  {m}", file=sys.stderr, flush=True),
            on_done=on_done,
        )

    raise_fd_limit()
    try:
        result = run_loop(main())
    except exp_run.ExperimentInterrupted as exc:
        _close(tracking, state.data, "KILLED")
        print(f"loadgen: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    _close(tracking, result.state, "FAILED" if result.failed else "FINISHED")
    print(ranking_text(result.state))
    print(f"report   {result.folder / 'experiment.html'}")
    for cell_id in result.failed:
        first = (result.state["cells"][cell_id]["error"] or "").splitlines()[:1]
        print(f"FAILED   {cell_id}: {first[0] if first else ''}", file=sys.stderr)
    return EXIT_SLA_FAIL if result.failed else EXIT_OK


def _close(tracking: ExperimentTracking | None, state: ExperimentFile, status: Status) -> None:
    """End the parent run; a failure is a warning (the experiment's folder is complete)."""
    if tracking is None:
        return
    try:
        tracking.close(state, status)
    except Exception as exc:  # noqa: BLE001 - tracking never changes the experiment's result
        track.warn(f"{exc}; the parent run was not closed")


def _dry_run(exp: Any, source: Path, todo: set[str] | None, earlier: Measured | None) -> int:
    from loadgen.experiment import estimate
    from loadgen.experiment import run as exp_run

    lines = exp_run.plan(exp, source, earlier)
    lines = [x for x in lines if todo is None or x.cell.id in todo]
    total = sum(x.expected_s for x in lines) + estimate.finish_seconds(earlier)
    sla = ", ".join(f"{k} < {v:g}" for k, v in exp.sla.items())
    print(
        f"experiment {exp.name}: {exp.load.method} per cell, SLA {sla} at {exp.attainment:.0%} attainment, "
        f"{exp.repeats} repeats, seed {exp.seed}"
    )
    print(
        f"{len(lines)} cells, expected {total / 60:.1f} min (interleaved: round r of every configuration "
        "before round r+1, each round shuffled)"
    )
    print(f"  {estimate_basis(lines, earlier)}")
    for x in lines:
        mark = " (measured)" if x.measured else ""
        print(f"{x.order:4d}. {x.cell.config.label:<48} repeat {x.cell.repeat}  ~{x.expected_s:.0f} s{mark}")
    return EXIT_OK


def estimate_basis(lines: list[PlanLine], earlier: Measured | None) -> str:
    """Where the dry run's figure comes from, in a line: the cells an earlier run of the same file
    measured, and the model's terms for the others."""
    from loadgen.experiment import estimate

    model = (
        f"the cells' stages, each +{estimate.STAGE_TAIL_S:g} s to drain, +{estimate.CELL_S:g} s a cell"
        f" (+{estimate.SERVER_START_S:g} s a serve: server's start), +{estimate.FINISH_S:g} s for the report"
    )
    measured = sum(1 for x in lines if x.measured)
    if earlier is None:
        return f"estimated from {model}; no earlier run of this file to measure from"
    if measured == len(lines):
        return f"measured: {earlier.folder} ran this file ({earlier.cells} cells done)"
    return f"measured for {measured} of {len(lines)} cells ({earlier.folder}); the others from {model}"


def ranking_text(state: ExperimentFile) -> str:
    """The ranking as the console shows it (also the head of experiment.md's)."""
    ranking = state.get("ranking")
    sla = ", ".join(f"p{round(state['attainment'] * 100)} {k} < {v:g}" for k, v in state["sla"].items())
    out = [f"ranking at {sla} ({state['attainment']:.0%} of requests meet every SLO):"]
    rows = ranking["rows"] if ranking else []
    for i, row in enumerate(rows):
        f = row["figures"]
        cap = f["capacity_rps"]
        if row["rank"] is None:
            out.append(f"  -. {row['label']:<44} not ranked: every repeat failed (the cells say why)")
            continue
        if cap["mean"] is None:
            head = "no capacity at the SLA"
        else:
            ci = (
                f" (95% CI {cap['low']:.1f}-{cap['high']:.1f})"
                if bounded(cap)
                else f" ({TOO_FEW})"
                if cap["n"] > 1
                else ""
            )
            head = f"capacity {cap['mean']:.1f} req/s{ci}"
        usd = f["usd_per_million_output_tokens"]["mean"]
        cost = f"   ${usd:.2f} / 1M output tok" if usd is not None else ""
        vs = rows[i - 1]["versus_next"] if i else None
        note = "" if vs is None or vs["distinguishable"] else f"   (not distinguishable from {i})"
        out.append(f"  {row['rank']}. {row['label']:<44} {head}{cost}{note}")
    return "\n".join(out)


__all__ = ["EXIT_BAD_INPUT", "add_parser", "cmd_experiment", "estimate_basis", "ranking_text"]
