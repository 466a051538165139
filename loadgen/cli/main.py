"""The command line: the only module that prints or exits.

    loadgen run PROFILE [flags]     run a benchmark; results in reports/<run-id>/
    loadgen sim [--preset ...]      serve the built-in GPU-serving simulator on a port
    loadgen report RUN_DIR          report.md, report.html, plots, CSV/Parquet of a saved run
    loadgen compare RUN RUN... -o DIR   side by side, condition diff, CDFs of saved runs
    loadgen gate CANDIDATE --baseline BASE --rules profiles/gate.yaml
                                    CI gate: exit 0 pass, 1 regression, 2 not comparable/bad input
    loadgen profiles                the shipped profiles, one line each (`loadgen run NAME` runs one)

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

EXIT_OK, EXIT_SLA_FAIL, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

# CLI flag -> dotted profile path. Flags are shortcuts; --set reaches every other field.
_FLAG_PATHS = {
    "url": "target.url",
    "model": "target.model",
    "endpoint": "target.endpoint",
    "api_key_env": "target.api_key_env",
    "transport": "target.transport",
    "prompt_format": "target.prompt_format",
    "timeout": "target.timeout_s",
    "concurrency": "load.concurrency",
    "rate": "load.rate",
    "arrival": "load.arrival",
    "burstiness": "load.burstiness",
    "max_concurrency": "load.max_concurrency",
    "warmup": "load.warmup_requests",
    "num_requests": "workload.num_requests",
    "duration": "workload.duration_s",
    "seed": "workload.seed",
    "tokenizer": "workload.prompt.tokenizer",
    "input_tokens": "workload.input_tokens",
    "output_tokens": "workload.output_tokens",
    "out": "output.dir",
    "run_id": "output.run_id",
    "name": "name",
}


def build_parser() -> argparse.ArgumentParser:
    from loadgen import __version__

    p = argparse.ArgumentParser(prog="loadgen", description="Load-test and benchmark LLM inference servers.")
    p.add_argument("--version", action="version", version=f"loadgen {__version__}")
    sub = p.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="what to do; `loadgen COMMAND --help` documents each",
    )

    r = sub.add_parser(
        "run",
        help="run a benchmark profile and write reports/<run-id>/",
        description="Run a benchmark. Flags override the profile; --set reaches any field.",
    )
    r.add_argument(
        "profile",
        nargs="?",
        help="profile YAML (a path, or the name of a shipped profile "
        "such as chat, long-context, code-completion, ci-smoke, quickstart)",
    )
    g = r.add_argument_group("target")
    g.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000 (omit: built-in simulator)")
    g.add_argument(
        "--model",
        help="model name to request (default: the first model /v1/models lists; "
        "SGLang: its /get_model_info; Triton: required)",
    )
    from loadgen.backends import registry  # the protocols and transports on offer, as registered
    from loadgen.backends.transports import TRANSPORTS

    protocols = "; ".join(
        f"{name}: {cls.description}" + (" (needs --model)" if cls.needs_model else "")
        for name, cls in registry.PROTOCOLS.items()
    )
    g.add_argument(
        "--endpoint", choices=registry.names(), help=f"protocol to drive; {protocols}".replace("%", "%%")
    )
    g.add_argument("--api-key-env", help="NAME of the environment variable holding the API key")
    g.add_argument(
        "--transport",
        choices=list(TRANSPORTS),
        help="HTTP client library (default httptools: the cheapest per token)",
    )
    g.add_argument(
        "--prompt-format",
        choices=["text", "token_ids"],
        help="send prompts as text or as token ids (completions or sglang_generate: exact lengths)",
    )
    g.add_argument("--timeout", type=float, help="per-request timeout in seconds")
    g.add_argument(
        "--sim",
        metavar="PRESET",
        help="use the built-in simulator with this preset, e.g. llama3-8b-fp8@h100 (ignores --url)",
    )
    g = r.add_argument_group("load")
    g.add_argument("--concurrency", type=int, help="closed loop: this many requests always in flight")
    g.add_argument("--rate", type=float, help="open loop: requests per second (clears --concurrency)")
    g.add_argument("--arrival", choices=["poisson", "constant", "gamma"], help="open-loop arrival process")
    g.add_argument("--burstiness", type=float, help="gamma shape: 1 = poisson, <1 burstier, >1 smoother")
    g.add_argument(
        "--max-concurrency",
        type=int,
        help="open loop: cap on requests in flight (waiting for a slot counts as client lag)",
    )
    g.add_argument("--warmup", type=int, help="warm-up requests, excluded from statistics")
    g = r.add_argument_group("workload")
    g.add_argument("--num-requests", type=int, help="measured requests to send (warm-up comes on top)")
    g.add_argument("--duration", type=float, help="stop sending after this many seconds")
    g.add_argument("--input-tokens", type=int, help="fixed prompt length in tokens")
    g.add_argument("--output-tokens", type=int, help="fixed output length in tokens (max_tokens)")
    g.add_argument("--seed", type=int, help="seed for lengths, prompts and arrivals")
    g.add_argument("--tokenizer", help="local tokenizer.json for exact prompt lengths")
    g = r.add_argument_group("output")
    g.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override any profile field, e.g. --set sla.ttft_ms=700 (repeatable)",
    )
    g.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="record a condition such as gpu=H200 or precision=fp8 (repeatable)",
    )
    g.add_argument("--name", help="run name (part of the run id)")
    g.add_argument("--out", help="directory for run folders (default: reports)")
    g.add_argument("--run-id", help="folder name for this run (default: time-name-random)")
    g.add_argument("--no-progress", action="store_true", help="no live progress bar")
    g.add_argument(
        "--no-report",
        action="store_true",
        help="skip report.md/report.html/plots at the end (`loadgen report` makes them later)",
    )
    g.add_argument("--fail-on-sla", action="store_true", help="exit 1 when the SLA verdict is fail")

    s = sub.add_parser(
        "sim",
        help="serve the built-in GPU-serving simulator",
        description="Serve the simulator as an OpenAI-compatible server for any client.",
    )
    s.add_argument("--preset", default="llama3-8b-fp16@h100", help="<model>-<precision>@<gpu>")
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
    s.add_argument("--ground-truth", help="write the per-request ground-truth log (JSONL) here")

    rp = sub.add_parser(
        "report",
        help="write report.md, report.html, plots and CSV/Parquet of a saved run",
        description="Regenerate a saved run's reports (no server needed): report.md, a "
        "self-contained report.html, plots/*.png, requests.csv, requests.parquet, and "
        "cost.json when a GPU price is known.",
    )
    rp.add_argument("run_dir", help="a run directory, e.g. reports/<run-id>")
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

    c = sub.add_parser(
        "compare",
        help="compare saved runs side by side (metrics, conditions, CDFs)",
        description="Compare saved runs (no server needed): every metric side by side "
        "with its difference relative to the first run, every condition in which the "
        "runs differ, and overlaid CDFs. Writes compare.md, compare.json and "
        "cdf_*.png into the output directory.",
    )
    c.add_argument("runs", nargs="+", metavar="RUN", help="run directories (the first is the reference)")
    c.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")

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

    sub.add_parser(
        "profiles",
        help="list the shipped profiles (run one with `loadgen run NAME`)",
        description="List the profiles installed with loadgen, one line each: the name "
        "`loadgen run NAME` accepts from any folder, and what the profile models.",
    )
    return p


def _resolve_profile_path(arg: str | None) -> Path | None:
    from loadgen.config import shipped

    return None if arg is None else shipped.resolve_profile(arg)


def _overrides(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag, path in _FLAG_PATHS.items():
        v = getattr(a, flag, None)
        if v is not None:
            out[path] = v
    if a.rate is not None:
        out["load.concurrency"] = None
    elif a.concurrency is not None:
        out["load.rate"] = None
    if a.sim is not None:
        out["target.url"] = None
        out["sim.preset"] = a.sim
    return out


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
            _resolve_profile_path(a.profile), overrides=_overrides(a), sets=[*a.set, *_labels(a.label)]
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
            result = _run_loop(main())
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


def cmd_profiles(a: argparse.Namespace) -> int:
    from loadgen.config import shipped

    found = shipped.shipped_profiles()
    width = max((len(p.name) for p in found), default=0)
    for p in found:
        print(f"{p.name:<{width}}  {p.description}".rstrip())
    return EXIT_OK


def _run_loop(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


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
        }[a.command](a)
    except LoadgenError as exc:  # every error the user can fix: one line (or a list), exit 2
        return _die(str(exc))
    except SystemExit as exc:
        return int(exc.code or 0)
