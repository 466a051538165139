"""The command line: ``main`` and one function per command (``cli/`` is the only code that
prints or exits; capacity and selfcheck have their commands beside their flags, the exit codes
and what every command shares are in ``common.py``).

    loadgen run PROFILE [flags]     run a benchmark; results in reports/<run-id>/
    loadgen sim [--preset ...]      serve the built-in GPU-serving simulator on a port
    loadgen report RUN_DIR          report.md, report.html, plots, CSV/Parquet of a saved run
    loadgen compare RUN RUN... -o DIR   side by side, condition diff, CDFs of saved runs
    loadgen gate CANDIDATE --baseline BASE --rules profiles/gate.yaml
                                    CI gate: exit 0 pass, 1 regression, 2 not comparable/bad input
    loadgen profiles                the shipped profiles, one line each (`loadgen run NAME` runs one)
    loadgen capacity PROFILE --sla 'ttft_ms<700' --attainment 0.99
                                    highest rate meeting the SLOs: exit 0 found, 1 none, 2 bad input

Exit codes: 0 done (and, with --fail-on-sla, the SLA passed), 1 the SLA failed with
--fail-on-sla, 2 bad input, an unreachable target or records that could not be written, 130 an
incomplete run: stopped (Ctrl-C, SIGTERM) before its request count or duration was reached;
its summary is written and says so, and its SLA verdict is "incomplete".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.cli.capacity import cmd_capacity
from loadgen.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_SERVED,
    EXIT_OK,
    EXIT_SLA_FAIL,
    die,
    labels,
    raise_fd_limit,
    resolve_profile_path,
)
from loadgen.cli.experiment import cmd_experiment
from loadgen.cli.parser import build_parser, overrides
from loadgen.cli.records import cmd_records
from loadgen.clock import run_loop

if TYPE_CHECKING:  # imported when a command runs, so `loadgen --help` starts fast
    from loadgen.cli.console import ProgressView
    from loadgen.cli.dashboard import Dashboard
    from loadgen.config import Profile
    from loadgen.live.stats import LiveStats
    from loadgen.result import RunResult

# Importable from here as before: the exit codes (now in common.py) and the parser (tests use it).
__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_SLA_FAIL", "build_parser", "main"]


def cmd_run(a: argparse.Namespace) -> int:
    from loadgen.cli import track
    from loadgen.cli.console import print_summary
    from loadgen.cli.live_view import live_view
    from loadgen.config import load_profile
    from loadgen.redact import Scrubber

    try:
        profile = load_profile(
            resolve_profile_path(a.profile), overrides=overrides(a), sets=[*a.set, *labels(a.label)]
        )
    except OSError as exc:
        return die(f"cannot read profile: {exc}")
    if a.no_progress:
        profile = profile.model_copy(update={"output": profile.output.model_copy(update={"progress": False})})
    api_key = None
    if profile.target.api_key_env:
        api_key = os.environ.get(profile.target.api_key_env)
        if not api_key:
            return die(
                f"target.api_key_env names {profile.target.api_key_env}, which is not set; "
                f"export {profile.target.api_key_env}=<your key>"
            )

    out = profile.output
    tracker = track.open_for(out.track, out.track_uri, Path(out.dir))  # exit 2 now, not after the run
    watch, view, exporters = live_view(a, profile)
    raise_fd_limit()
    try:
        with view:
            result = run_loop(_run_until_stopped(profile, api_key, view, watch))
    except KeyboardInterrupt:
        print("loadgen: aborted; records finished so far are in the run's requests.jsonl", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        for exporter in exporters:
            exporter.close()
    report = None if a.no_report else _report_after_run(result.run_dir)
    print_summary(result)
    if report is not None:
        print(f"report   {result.run_dir / 'report.html'}")
    secrets = Scrubber(
        profile.target.headers, extra=[api_key or ""], secret_names=profile.target.secret_headers
    )
    track.log_run(tracker, result.run_dir, secrets, records=a.track_records)
    return _run_exit_code(result, fail_on_sla=a.fail_on_sla)


async def _run_until_stopped(
    profile: Profile, api_key: str | None, view: ProgressView | Dashboard, watch: LiveStats | None = None
) -> RunResult:
    """The run, stopped cleanly by the first Ctrl-C or a SIGTERM (in-flight requests cancelled,
    the summary written); a second Ctrl-C aborts at once."""
    from loadgen.runner import api

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    presses = 0

    def on_sigint() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            view.note("stopping: cancelling in-flight requests, writing the summary (Ctrl-C again to abort)")
            stop.set()
        else:
            raise KeyboardInterrupt

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    return await api.run_async(
        profile, api_key=api_key, stop=stop, on_progress=view.update, on_status=view.note, watch=watch
    )


def _report_after_run(run_dir: Path) -> Path | None:
    """The finished run's report.html, or None with a warning: the run's files are saved, so a
    report that cannot be written does not fail the run (``loadgen report`` makes it later)."""
    from loadgen.report import write_report

    try:
        return write_report(run_dir).get("report.html")
    except Exception as exc:  # noqa: BLE001 - the run's files are saved; the report is extra
        print(
            f"loadgen: warning: report not written ({exc}); try `loadgen report {run_dir}`", file=sys.stderr
        )
        return None


def _run_exit_code(result: RunResult, *, fail_on_sla: bool) -> int:
    """130 for an incomplete run, 3 for one that served nothing (its last line says why), 1 for
    a failed SLA under --fail-on-sla, else 0."""
    from loadgen.analysis.sla import nothing_served

    if not result.summary.get("complete", True):
        # Stopped before its limits: its numbers describe a shorter run than asked for, so it
        # neither passes nor fails an SLA; 130 is what shells expect of an interrupted command.
        print(f"loadgen: incomplete run: {result.summary.get('incomplete_reason')}", file=sys.stderr)
        return EXIT_INTERRUPTED
    why = nothing_served(result.summary)
    if why is not None:
        print(f"loadgen: {why}", file=sys.stderr)
        return EXIT_NOTHING_SERVED
    if fail_on_sla and result.summary["sla"]["verdict"] == "fail":
        return EXIT_SLA_FAIL
    return EXIT_OK


def cmd_sim(a: argparse.Namespace) -> int:
    from loadgen.config import parse_set  # one parser for --set values everywhere
    from loadgen.sim import SimConfig, SimConfigError, serve

    if getattr(a, "sim_command", None) == "fit":
        from loadgen.cli.sim_fit import cmd_fit

        return cmd_fit(a)
    data: dict[str, Any] = {}
    if a.preset_file is not None:
        data["preset_file"] = a.preset_file
    if a.preset is not None:
        data["preset"] = a.preset
    if a.time_scale is not None:
        data["time_scale"] = a.time_scale
    for raw in a.set:
        key, value = parse_set(raw)
        data[key] = value
    try:
        config = SimConfig.from_dict(data)
    except SimConfigError as exc:
        return die(str(exc))
    try:
        serve(
            config,
            a.host,
            a.port,
            ground_truth_path=Path(a.ground_truth) if a.ground_truth else None,
            grpc_port=a.grpc_port,
        )
    except ImportError as exc:
        return die(f"--grpc-port needs gRPC ({exc}): install loadgen[grpc]")
    except OSError as exc:
        return die(f"cannot listen on {a.host}:{a.port}: {exc}")
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def cmd_report(a: argparse.Namespace) -> int:
    from loadgen.report import write_report
    from loadgen.report.experiment import EXPERIMENT, write_experiment_report

    try:
        if (Path(a.run_dir) / EXPERIMENT).is_file():  # an experiment's folder: its ranking page
            for path in write_experiment_report(a.run_dir).values():
                print(f"wrote {path}")
            return EXIT_OK
        written = write_report(a.run_dir, a.out, gpu_hour_cost=a.gpu_hour_cost, gpu_count=a.gpu_count)
    except OSError as exc:
        return die(f"cannot write the report: {exc}")
    for path in written.values():
        print(f"wrote {path}")
    cost_path = written.get("cost.json")
    if cost_path is not None:
        import json

        cost = json.loads(cost_path.read_text())
        print(
            "cost  "
            + ", ".join(
                f"{'-' if v is None else f'${v:.4g}'} per million {k.replace('_', ' ')}"
                for k, v in (
                    (k, cost[f"usd_per_million_{k}"])
                    for k in (
                        ("input_tokens", "items")  # embeddings, rerank
                        if "usd_per_million_items" in cost
                        else ("output_tokens", "total_tokens", "output_tokens_at_goodput")
                    )
                )
            )
        )
    return EXIT_OK


def cmd_compare(a: argparse.Namespace) -> int:
    from loadgen.analysis.compare import compare
    from loadgen.report import compare as compare_report

    try:
        cmp = compare(a.runs)
        written = compare_report.write(cmp, a.out)
    except OSError as exc:
        return die(f"cannot write the comparison: {exc}")
    for w in cmp.warnings:
        print(f"WARNING: {w}")
    print(compare_report.markdown(cmp).split("## Conditions that differ")[0].rstrip())
    print("\nconditions that differ: " + (", ".join(cmp.differing_fields) or "none"))
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK


def cmd_gate(a: argparse.Namespace) -> int:
    import json

    from loadgen.analysis.gate import gate
    from loadgen.report import gate as gate_report

    if a.cell:
        from loadgen.experiment.state import cell_folder

        a.candidate, a.baseline = cell_folder(a.candidate, a.cell), cell_folder(a.baseline, a.cell)
    if a.rules is None:
        from loadgen.config import shipped

        a.rules = shipped.gate_rules_path()
    res = gate(
        a.candidate,
        a.baseline,
        a.rules,
        resamples=a.resamples,
        seed=a.seed,
        allow_different=a.allow_different,
        strict_conditions=a.strict_conditions,
    )
    text = gate_report.markdown(res)
    print(text, end="")
    try:
        if a.markdown:
            Path(a.markdown).write_text(text)
        if a.junit:
            Path(a.junit).write_text(gate_report.junit_xml(res))
        if a.json:
            Path(a.json).write_text(json.dumps(gate_report.to_dict(res), indent=2) + "\n")
    except OSError as exc:
        return die(f"cannot write the gate report: {exc}")
    return res.exit_code


def cmd_selfcheck(a: argparse.Namespace) -> int:
    from loadgen.cli import selfcheck

    return selfcheck.cmd_selfcheck(a, resolve_profile_path(a.profile), overrides(a))


def cmd_profiles(a: argparse.Namespace) -> int:
    from loadgen.config import shipped

    found = shipped.shipped_profiles()
    width = max((len(p.name) for p in found), default=0)
    for p in found:
        print(f"{p.name:<{width}}  {p.description}".rstrip())
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    from loadgen.errors import Interrupted, LoadgenError

    a = build_parser().parse_args(argv)
    try:
        return {
            "run": cmd_run,
            "sim": cmd_sim,
            "compare": cmd_compare,
            "gate": cmd_gate,
            "report": cmd_report,
            "profiles": cmd_profiles,
            "capacity": cmd_capacity,
            "selfcheck": cmd_selfcheck,
            "experiment": cmd_experiment,
            "records": cmd_records,
        }[a.command](a)
    except Interrupted as exc:  # stopped before any load: nothing measured, nothing wrong
        print(f"loadgen: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except LoadgenError as exc:  # every error the user can fix: one line (or a list), exit 2
        return die(str(exc))
    except SystemExit as exc:
        return int(exc.code or 0)
    except BrokenPipeError:  # `loadgen ... | head`: the reader left; no traceback, and none at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
