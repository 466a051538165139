"""The command line's arguments: every subcommand, flag and help text, and what the ``run``
flags change in the profile. Parsing only; ``main.py`` acts on the result."""

from __future__ import annotations

import argparse
import re
from typing import Any

from loadgen.cli.borrow import borrow, leave_unset
from loadgen.cli.selfcheck import add_parser as add_selfcheck
from loadgen.errors import ConfigError

# CLI flag -> dotted profile path. Flags are shortcuts; --set reaches every other field.
FLAG_PATHS = {
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
    "dataset": "workload.dataset.path",
    "trace": "workload.trace.path",
    "time_scale": "workload.trace.time_scale",
    "workers": "client.workers",
    "ray": "client.ray",
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
    g = r.add_argument_group("client")
    g.add_argument(
        "--workers",
        metavar="N|auto",
        help="drive the load from N processes (auto: usable cores minus one); one result, one "
        "clock; see the README's 'More than one core'",
    )
    g.add_argument(
        "--ray",
        metavar="auto|local|ADDRESS",
        help="run the workers as Ray actors across a cluster (pip install 'loadgen[ray]'); "
        "--workers then counts actors",
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
    g.add_argument(
        "--sweep",
        metavar="KNOB=VALUES",
        help="run one stage per value: concurrency=1,2,4,8 "
        "or rate=2..20:10 (10 values, linear) or concurrency=1..256:x2 (geometric)",
    )
    g.add_argument(
        "--stage-duration",
        type=duration,
        metavar="TIME",
        help="length of each sweep stage, e.g. 30s or 2m (default: the workload's duration or request count)",
    )
    g.add_argument(
        "--ramp",
        type=duration,
        metavar="TIME",
        help="ramp each sweep stage's load up "
        "linearly over this long (its requests count as warm-up), e.g. 10s",
    )
    g = r.add_argument_group("workload")
    g.add_argument("--num-requests", type=int, help="measured requests to send (warm-up comes on top)")
    g.add_argument("--duration", type=float, help="stop sending after this many seconds")
    g.add_argument("--input-tokens", type=int, help="fixed prompt length in tokens")
    g.add_argument("--output-tokens", type=int, help="fixed output length in tokens (max_tokens)")
    g.add_argument("--seed", type=int, help="seed for lengths, prompts and arrivals")
    g.add_argument("--tokenizer", help="local tokenizer.json for exact prompt lengths")
    g.add_argument("--dataset", metavar="FILE", help="prompts from a local ShareGPT .json or prompts .jsonl")
    g.add_argument(
        "--trace",
        metavar="FILE",
        help="replay a trace's arrivals and lengths: Mooncake .jsonl, Azure .csv or native .jsonl "
        "(its times replace --rate/--concurrency)",
    )
    g.add_argument(
        "--time-scale", type=float, metavar="X", help="stretch the trace's time by X (2: half the rate)"
    )
    g = r.add_argument_group("output")
    g.add_argument(
        "--keep-answers",
        action="store_true",
        default=None,
        help="keep each answer's text in requests.jsonl (output agreement between runs needs it)",
    )
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

    _add_capacity(sub, r)
    add_selfcheck(sub, r)

    sub.add_parser(
        "profiles",
        help="list the shipped profiles (run one with `loadgen run NAME`)",
        description="List the profiles installed with loadgen, one line each: the name "
        "`loadgen run NAME` accepts from any folder, and what the profile models.",
    )
    return p


def overrides(a: argparse.Namespace) -> dict[str, Any]:
    """The profile changes the ``run`` flags ask for, as dotted paths (None clears a setting)."""
    out: dict[str, Any] = {}
    for flag, path in FLAG_PATHS.items():
        v = getattr(a, flag, None)
        if v is not None:
            out[path] = v
    # A limit given on the command line replaces the profile's other one (a profile's
    # num_requests would otherwise end a --duration 60 run after 200 requests), unless both are.
    if getattr(a, "duration", None) is not None and getattr(a, "num_requests", None) is None:
        out["workload.num_requests"] = None
    elif getattr(a, "num_requests", None) is not None and getattr(a, "duration", None) is None:
        out["workload.duration_s"] = None
    if a.rate is not None:
        out["load.concurrency"] = None
    elif a.concurrency is not None:
        out["load.rate"] = None
    if getattr(a, "trace", None) is not None:  # a trace's own times schedule the run
        out.setdefault("load.concurrency", None)
        out.setdefault("load.rate", None)
    if getattr(a, "keep_answers", None):
        out["output.answers.keep"] = True
    if a.sim is not None:
        out["target.url"] = None
        out["sim.preset"] = a.sim
    if a.sweep is not None:
        knob, sep, values = a.sweep.partition("=")
        if not sep or knob.strip() not in ("concurrency", "rate"):
            raise ConfigError(
                f"--sweep {a.sweep!r}: expected concurrency=VALUES or rate=VALUES, e.g. "
                f"--sweep concurrency=1,2,4,8 or --sweep rate=2..20:10",
                what="flags",
            )
        series: Any = values.strip()
        if "," in series:
            series = [v.strip() for v in series.split(",") if v.strip()]
        sweep: dict[str, Any] = {knob.strip(): series}
        if a.stage_duration is not None:
            sweep["stage_duration_s"] = a.stage_duration
        if a.ramp is not None:
            sweep["ramp_s"] = a.ramp
        out.update(
            {"load.sweep": sweep, "load.concurrency": None, "load.rate": None, "load.max_concurrency": None}
        )
    elif a.stage_duration is not None or a.ramp is not None:
        raise ConfigError(
            "--stage-duration and --ramp shape the stages of a --sweep; add --sweep "
            "(or set load.sweep in the profile and use --set load.sweep.ramp_s=...)",
            what="flags",
        )
    return out


_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """Seconds from '30', '30s', '500ms', '2m' or '1h' (argparse reports a ValueError cleanly)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h)?\s*", text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (e.g. 30s, 500ms, 2m)")
    return float(m[1]) * _UNITS[m[2] or "s"]


def _add_capacity(sub: Any, run: argparse.ArgumentParser) -> None:
    """``loadgen capacity``: the target flags of ``run`` plus the search's own."""
    cp = sub.add_parser(
        "capacity",
        help="find the highest request rate at which a fraction A of requests meet every SLO",
        description="Search the capacity: the highest open-loop (Poisson) request rate at which at "
        "least --attainment of requests meet every per-request SLO (DistServe's goodput). Brackets "
        "by doubling, bisects to --precision, re-measures the boundary; one run folder with every "
        "stage, capacity.json and summary.json's `capacity`. Exit 0 found, 1 no rate met the SLOs, "
        "2 bad input or the target could not be reached, 130 interrupted.",
    )
    cp.add_argument("profile", nargs="?", help="profile YAML or a shipped profile's name (its workload)")
    borrow(cp, run, ("--url", "--sim", "--model", "--api-key-env", "--seed", "--name", "--out", "--run-id"))
    cp.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="record a condition")
    cp.add_argument(
        "--sla",
        type=parse_sla,
        metavar="SLOS",
        help="per-request SLOs, a bound every request must meet: 'ttft_ms<700, tpot_ms<50' (metrics "
        "ttft_ms, tpot_ms, e2e_ms). A stat as in 'p99 ttft_ms<700' is accepted and dropped: the metric "
        "and bound become the SLO and --attainment says how many requests must meet it. Replaces "
        "the profile's sla.ttft_ms/tpot_ms/e2e_ms (default: those)",
    )
    cp.add_argument("--attainment", type=float, default=0.99, metavar="A", help="fraction (default 0.99)")
    cp.add_argument(
        "--gpu-hour-cost", type=float, metavar="USD", help="price of one GPU-hour, for $ / 1M tokens"
    )
    cp.add_argument("--gpu-count", type=float, metavar="N", help="GPUs serving the model (default 1)")
    g = cp.add_argument_group("search")
    g.add_argument(
        "--stage-duration",
        dest="capacity_stage_s",
        type=duration,
        default=15.0,
        metavar="S",
        help="measured length of each stage (default 15s; at least 20 requests)",
    )
    g.add_argument(
        "--stage-warmup",
        type=duration,
        default=5.0,
        metavar="S",
        help="warm-up at the stage's rate before it is measured (default 5s; a few end-to-end latencies)",
    )
    g.add_argument(
        "--start-rate", type=float, metavar="R", help="first rate (default: the profile's, else 1)"
    )
    g.add_argument("--max-rate", type=float, metavar="R", help="never offer more than R req/s")
    g.add_argument("--precision", type=float, default=0.05, help="stop when hi/lo - 1 <= this (default 0.05)")
    g.add_argument("--max-stages", type=int, default=14, metavar="N", help="stage budget (default 14)")
    leave_unset(cp, run)


_SLO = re.compile(
    r"(?:(?P<stat>[a-z][a-z0-9_.]*)\s+)?(?P<metric>[a-z][a-z0-9_]*)\s*(?:<=|<)\s*(?P<bound>[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)"
)


def parse_sla(text: str) -> dict[str, float]:
    """``--sla "p99 ttft_ms<700, p99 tpot_ms<50"`` -> ``{"ttft_ms": 700.0, "tpot_ms": 50.0}``.

    Each item is a per-request SLO, a bound every request must meet (``ttft_ms<700`` sets
    sla.ttft_ms = 700). A leading stat (``p99``) is accepted and dropped: how many requests must
    meet the bound is the attainment target, not part of the SLO."""
    from loadgen import metric_defs
    from loadgen.analysis.sla import SLO_FIELDS

    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in re.split(r"[,;]", text))):
        m = _SLO.fullmatch(part.lower())
        if m is None or m["metric"] not in SLO_FIELDS:
            raise argparse.ArgumentTypeError(
                f"{part!r}: expected '[stat] metric < bound' with metric one of {', '.join(SLO_FIELDS)}, "
                "e.g. 'ttft_ms<700' or 'p99 tpot_ms<50'"
            )
        stat, bound = m["stat"], float(m["bound"])
        if stat is not None and stat.replace(".", "_") not in metric_defs.RULE_STATS:
            valid = ", ".join(metric_defs.RULE_STATS)
            raise argparse.ArgumentTypeError(f"{part!r}: unknown stat; valid: {valid}")
        if not bound > 0 or m["metric"] in out:
            raise argparse.ArgumentTypeError(f"{part!r}: each metric once, with a bound > 0")
        out[m["metric"]] = bound
    if not out:
        raise argparse.ArgumentTypeError("no SLO given; e.g. --sla 'ttft_ms<700, tpot_ms<50'")
    return out
