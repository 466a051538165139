"""The command line: the only module that prints or exits.

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
from typing import Any

from loadgen.cli.parser import build_parser, overrides
from loadgen.clock import run_loop

EXIT_OK, EXIT_SLA_FAIL, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _resolve_profile_path(arg: str | None) -> Path | None:
    from loadgen.config import shipped

    return None if arg is None else shipped.resolve_profile(arg)


def _labels(raw: Sequence[str]) -> list[str]:
    out = []
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(_die(f"--label {item!r}: expected KEY=VALUE, e.g. --label gpu=H200"))
        out.append(f"labels.{key}={value}")
    return out


def _die(msg: str) -> int:
    print(f"loadgen: error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def cmd_run(a: argparse.Namespace) -> int:
    from loadgen.cli.console import ProgressView, print_summary
    from loadgen.config import load_profile
    from loadgen.runner import api

    try:
        profile = load_profile(
            _resolve_profile_path(a.profile), overrides=overrides(a), sets=[*a.set, *_labels(a.label)]
        )
    except OSError as exc:
        return _die(f"cannot read profile: {exc}")
    if a.no_progress:
        profile = profile.model_copy(update={"output": profile.output.model_copy(update={"progress": False})})
    api_key = None
    if profile.target.api_key_env:
        api_key = os.environ.get(profile.target.api_key_env)
        if not api_key:
            return _die(
                f"target.api_key_env names {profile.target.api_key_env}, which is not set; "
                f"export {profile.target.api_key_env}=<your key>"
            )

    view = ProgressView(enabled=profile.output.progress and sys.stderr.isatty())

    async def main() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        presses = 0

        def on_sigint() -> None:
            nonlocal presses
            presses += 1
            if presses == 1:
                view.note(
                    "stopping: cancelling in-flight requests, writing the summary (Ctrl-C again to abort)"
                )
                stop.set()
            else:
                raise KeyboardInterrupt

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        return await api.run_async(
            profile, api_key=api_key, stop=stop, on_progress=view.update, on_status=view.note
        )

    _raise_fd_limit()
    try:
        with view:
            result = run_loop(main())
    except KeyboardInterrupt:
        print("loadgen: aborted; records finished so far are in the run's requests.jsonl", file=sys.stderr)
        return EXIT_INTERRUPTED
    report = None
    if not a.no_report:
        from loadgen.report import write_report

        try:
            report = write_report(result.run_dir).get("report.html")
        except Exception as exc:  # noqa: BLE001 - the run's files are saved; the report is extra
            print(
                f"loadgen: warning: report not written ({exc}); try `loadgen report {result.run_dir}`",
                file=sys.stderr,
            )
    print_summary(result)
    if report is not None:
        print(f"report   {result.run_dir / 'report.html'}")
    if not result.summary.get("complete", True):
        # Stopped before its limits: its numbers describe a shorter run than asked for, so it
        # neither passes nor fails an SLA; 130 is what shells expect of an interrupted command.
        print(f"loadgen: incomplete run: {result.summary.get('incomplete_reason')}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if a.fail_on_sla and result.summary["sla"]["verdict"] == "fail":
        return EXIT_SLA_FAIL
    return EXIT_OK


def cmd_sim(a: argparse.Namespace) -> int:
    from loadgen.config import parse_set  # one parser for --set values everywhere
    from loadgen.sim import SimConfig, SimConfigError, serve

    data: dict[str, Any] = {"preset": a.preset}
    if a.time_scale is not None:
        data["time_scale"] = a.time_scale
    for raw in a.set:
        key, value = parse_set(raw)
        data[key] = value
    try:
        config = SimConfig.from_dict(data)
    except SimConfigError as exc:
        return _die(str(exc))
    try:
        serve(config, a.host, a.port, ground_truth_path=Path(a.ground_truth) if a.ground_truth else None)
    except OSError as exc:
        return _die(f"cannot listen on {a.host}:{a.port}: {exc}")
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def cmd_report(a: argparse.Namespace) -> int:
    from loadgen.report import write_report

    try:
        written = write_report(a.run_dir, a.out, gpu_hour_cost=a.gpu_hour_cost, gpu_count=a.gpu_count)
    except OSError as exc:
        return _die(f"cannot write the report: {exc}")
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
                    for k in ("output_tokens", "total_tokens", "output_tokens_at_goodput")
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
        return _die(f"cannot write the comparison: {exc}")
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
        return _die(f"cannot write the gate report: {exc}")
    return res.exit_code


def cmd_capacity(a: argparse.Namespace) -> int:
    from loadgen.config import ConfigError, load_profile
    from loadgen.runner import capacity

    # The search sets every stage; the profile lends its workload, target, SLOs and its rate as
    # the start (if it has none, 1 req/s; a sweep's profile gets a nominal length to validate).
    path, sets = _resolve_profile_path(a.profile), [*a.set, *_labels(a.label)]
    shape: dict[str, Any] = {"load.stages": [], "load.sweep": None, "load.max_concurrency": None}
    if a.start_rate is not None:
        shape["load.rate"] = a.start_rate
    try:
        try:
            profile = load_profile(path, overrides={**overrides(a), **shape}, sets=sets)
        except ConfigError:
            fallback = {"load.rate": a.start_rate or 1.0, "workload.duration_s": 60.0}
            profile = load_profile(path, overrides={**overrides(a), **shape, **fallback}, sets=sets)
    except OSError as exc:
        return _die(f"cannot read profile: {exc}")
    api_key = os.environ.get(profile.target.api_key_env) if profile.target.api_key_env else None
    if profile.target.api_key_env and not api_key:
        return _die(f"target.api_key_env names {profile.target.api_key_env}, which is not set")

    def on_stage(m: Any, passed: bool) -> None:
        att = "-" if m.attainment is None else f"{m.attainment:.3f}"
        print(f"  stage {m.stage}: {m.rate:g} req/s  attained {att} of {m.flags.size}  "
              f"{'pass' if passed else 'fail'}", file=sys.stderr, flush=True)  # fmt: skip

    async def main() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        return await capacity.run_capacity(
            profile, attainment=a.attainment, slos=a.sla, start_rate=a.start_rate,
            stage_s=a.capacity_stage_s, warmup_s=a.stage_warmup, precision=a.precision,
            max_stages=a.max_stages, max_rate=a.max_rate, gpu_hour_cost=a.gpu_hour_cost,
            gpu_count=a.gpu_count, api_key=api_key, stop=stop,
            on_status=lambda msg: print(msg, file=sys.stderr, flush=True), on_stage=on_stage,
        )  # fmt: skip

    _raise_fd_limit()
    res = run_loop(main())
    cap = res.capacity
    print(_capacity_headline(cap))
    if cap["stopped_because"]:
        print(f"stopped: {cap['stopped_because']}")
    print("\n".join(_capacity_rows(cap)))
    print(f"results  {res.run_dir / capacity.CAPACITY}")
    if res.summary.get("interrupted"):
        return EXIT_INTERRUPTED
    if cap["capacity_rps"] is None:
        return EXIT_SLA_FAIL if any(s["counted"] for s in cap["stages"]) else EXIT_BAD_INPUT
    return EXIT_OK


def cmd_selfcheck(a: argparse.Namespace) -> int:
    from loadgen.cli import selfcheck

    return selfcheck.cmd_selfcheck(a, _resolve_profile_path(a.profile), overrides(a))


def _capacity_headline(cap: dict) -> str:
    """'max sustainable rate 11.8 req/s (95% CI 11.2-12.3), goodput 11.6 req/s, $0.41 / 1M
    output tokens, from 9 stages', or that no rate met the SLOs."""
    n = len(cap["stages"])
    if cap["capacity_rps"] is None:
        return f"no rate met the SLOs for {cap['attainment']:g} of requests, from {n} stages"
    lo, hi = cap["ci95"]
    parts = [
        f"max sustainable rate {_num(cap['capacity_rps'])} req/s "
        f"(95% CI {_num(lo) if lo is not None else '0'}-{_num(hi) if hi is not None else 'open'})"
    ]
    if cap["goodput_rps"] is not None:
        parts.append(f"goodput {_num(cap['goodput_rps'])} req/s")
    if cap["usd_per_million_output_tokens"] is not None:
        parts.append(f"${cap['usd_per_million_output_tokens']:.2f} / 1M output tokens")
    return ", ".join(parts) + f", from {n} stages"


def _capacity_rows(cap: dict) -> list[str]:
    """The stage table in the order run: level asked, rate offered ("n/c": not counted, the
    client lagged)."""
    cols = ("stage", "level/s", "offered/s", "attained", "n", "", "tput/s", "TTFT p99", "TPOT p99")
    rows = ["  ".join(f"{c:>8}" for c in cols)]
    for s in cap["stages"]:
        verdict = ("pass" if s["passed"] else "fail") if s["counted"] else "n/c"
        att = "-" if s["attainment"] is None else f"{s['attainment']:.3f}"
        cells = (s["stage"], _num(s["rate"]), _num(s["offered_rps"]), att, s["requests"], verdict,
                 _num(s["throughput_rps"]), _num(s["ttft_p99_ms"]), _num(s["tpot_p99_ms"]))  # fmt: skip
        rows.append("  ".join(f"{c:>8}" for c in cells))
    return rows


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def cmd_profiles(a: argparse.Namespace) -> int:
    from loadgen.config import shipped

    found = shipped.shipped_profiles()
    width = max((len(p.name) for p in found), default=0)
    for p in found:
        print(f"{p.name:<{width}}  {p.description}".rstrip())
    return EXIT_OK


def _raise_fd_limit() -> None:
    # An uncapped open loop holds one socket per request in flight; the default soft limit
    # (often 1024) would turn a load spike into connect errors that are the client's fault.
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    from loadgen.errors import LoadgenError

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
        }[a.command](a)
    except LoadgenError as exc:  # every error the user can fix: one line (or a list), exit 2
        return _die(str(exc))
    except SystemExit as exc:
        return int(exc.code or 0)
