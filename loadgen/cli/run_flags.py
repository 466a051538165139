"""``loadgen run``'s arguments: the profile and the flags that override it, one function per
group of flags (target, client, load, workload, output). ``capacity`` and ``selfcheck`` borrow
some of these flags (``borrow.py``); ``overrides.py`` says what each changes in the profile."""

from __future__ import annotations

import argparse
from typing import Any, get_args

from loadgen.cli import track
from loadgen.cli.argtypes import duration, repeats
from loadgen.config.base import Arrival


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loadgen run``: a profile and the flags that override it, in five groups; returned, for
    the commands that borrow some of its flags."""
    run = sub.add_parser(
        "run",
        help="run a benchmark profile and write reports/<run-id>/",
        description="Run a benchmark. Flags override the profile; --set reaches any field.",
    )
    run.add_argument(
        "profile",
        nargs="?",
        help="profile YAML (a path, or the name of a shipped profile "
        "such as chat, long-context, code-completion, ci-smoke, quickstart)",
    )
    for add_group in (_run_target, _run_client, _run_load, _run_workload, _run_output):
        add_group(run)
    return run


def _run_target(run: argparse.ArgumentParser) -> None:
    """Where the load goes: the server (or the simulator), protocol, transport, model."""
    g = run.add_argument_group("target")
    g.add_argument(
        "--url",
        action="append",
        help="server base URL, e.g. http://127.0.0.1:8000 (omit: built-in simulator); give it "
        "more than once to spread the load over replicas (target.urls, --set target.balance=...)",
    )
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
        "--reset-path",
        metavar="PATH",
        help="POST this path to the server before the load (and before each repeat), with the "
        "run's headers: its cache flush, e.g. /reset_prefix_cache (vLLM) or /flush_cache (SGLang)",
    )
    g.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the one unmeasured request sent before the load to check the server takes the "
        "run's body (target.preflight: false)",
    )
    g.add_argument(
        "--sim",
        metavar="PRESET",
        help="use the built-in simulator with this preset, e.g. llama3-8b-fp8@h100 (ignores --url)",
    )


def _run_client(run: argparse.ArgumentParser) -> None:
    """How the client spreads the load: processes, or Ray actors."""
    g = run.add_argument_group("client")
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


def _run_load(run: argparse.ArgumentParser) -> None:
    """How requests go out: closed or open loop, arrivals, warm-up, a sweep's stages."""
    g = run.add_argument_group("load")
    g.add_argument("--concurrency", type=int, help="closed loop: this many requests always in flight")
    g.add_argument("--rate", type=float, help="open loop: requests per second (clears --concurrency)")
    g.add_argument("--arrival", choices=get_args(Arrival), help="open-loop arrival process")
    g.add_argument("--burstiness", type=float, help="gamma shape: 1 = poisson, <1 burstier, >1 smoother")
    g.add_argument(
        "--max-concurrency",
        type=int,
        help="open loop: cap on requests in flight (waiting for a slot counts as client lag)",
    )
    g.add_argument("--warmup", type=int, help="warm-up requests, excluded from statistics")
    g.add_argument(
        "--repeats",
        type=repeats,
        metavar="N",
        help="run the same load N times (same seed, same schedule; fresh connections, and a fresh "
        "simulator each), each kept in repeat-K/ of the run folder; the headline figures get a "
        "95%% between-repeat interval and the gate uses the repeats' spread",
    )
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


def _run_workload(run: argparse.ArgumentParser) -> None:
    """What the requests are: how many or how long, their lengths, prompts, a trace."""
    g = run.add_argument_group("workload")
    g.add_argument("--num-requests", type=int, help="measured requests to send (warm-up comes on top)")
    g.add_argument(
        "--duration", type=duration, metavar="TIME", help="stop sending after this long: 180, 180s or 3m"
    )
    g.add_argument(
        "--until",
        metavar="PRECISION",
        help="also end each stage once a statistic's 95%% interval is this tight, e.g. "
        "'p99 ttft_ms ±5%%' (or +-5%%); --duration / --num-requests then limit a stage that never gets there",
    )
    g.add_argument("--input-tokens", type=int, help="fixed prompt length in tokens")
    g.add_argument("--output-tokens", type=int, help="fixed output length in tokens (max_tokens)")
    g.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="embeddings, rerank: fixed inputs (documents) a request, each of --input-tokens",
    )
    g.add_argument("--seed", type=int, help="seed for lengths, prompts and arrivals")
    g.add_argument(
        "--tokenizer",
        help="local tokenizer.json, or the model folder holding it (and its chat template), "
        "for exact prompt lengths",
    )
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


def _run_output(run: argparse.ArgumentParser) -> None:
    """What the run writes and records: answers, overrides, labels, names, reports."""
    g = run.add_argument_group("output")
    g.add_argument(
        "--keep-answers",
        action="store_true",
        default=None,
        help="keep each answer's text in requests.jsonl (output agreement between runs needs it)",
    )
    g.add_argument(
        "--records",
        choices=("jsonl", "columnar"),
        help="how the run keeps its records: requests.jsonl (default), or records.parquet "
        "(about 2 bytes a streamed token; output.records)",
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
    g.add_argument("--no-progress", action="store_true", help="no live view (the same as --ui none)")
    g.add_argument(
        "--ui",
        choices=("dashboard", "progress", "none"),
        help="the live view: dashboard (tails, rates, errors, the server's queue, the client's health; "
        "the default on a terminal), progress (one progress bar) or none",
    )
    g.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve loadgen's own live metrics (requests, in flight, TTFT/ITL/E2E histograms, tokens) "
        "to Prometheus on 127.0.0.1:PORT/metrics while the run goes (0: any free port)",
    )
    g.add_argument(
        "--metrics-host", default="127.0.0.1", help="address --metrics-port listens on (default 127.0.0.1)"
    )
    g.add_argument(
        "--otlp",
        metavar="URL",
        help="push the same metrics as OpenTelemetry (GenAI semantic conventions) to an OTLP/HTTP "
        "collector, e.g. http://127.0.0.1:4318 (pip install 'loadgen[otel]')",
    )
    g.add_argument(
        "--no-report",
        action="store_true",
        help="skip report.md/report.html/plots at the end (`loadgen report` makes them later)",
    )
    g.add_argument("--fail-on-sla", action="store_true", help="exit 1 when the SLA verdict is fail")
    track.add_flags(g, profile=True)
