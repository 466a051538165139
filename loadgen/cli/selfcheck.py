"""``loadgen selfcheck``: its flags and its command (the search is ``runner.selfcheck``).

Part of the CLI layer: it prints; the library does not.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from loadgen.cli.borrow import borrow, leave_unset

# The flags of `run` that shape the load being checked (the target is always the simulator).
_BORROWED = (
    "--sim",
    "--transport",
    "--endpoint",
    "--prompt-format",
    "--concurrency",
    "--rate",
    "--arrival",
    "--burstiness",
    "--input-tokens",
    "--output-tokens",
    "--seed",
    "--tokenizer",
)


def add_parser(sub: Any, run: argparse.ArgumentParser) -> None:
    sc = sub.add_parser(
        "selfcheck",
        help="measure how much load this machine drives without distorting what it measures",
        description="Run the profile's load shape against the built-in simulator at rising load "
        "(doubling, then two bisections; a load fails when a second run at it fails too), once "
        "per number of workers from 1 to the usable cores, "
        "and report the highest load at which the client's own timestamp error stays under the "
        "threshold (first-token lag p99 vs the simulator's ground truth, chunk lag p99 under twice "
        "it, no client_limited flag, open loop: send lag p99). Saved with this machine's identity; "
        "`loadgen run` against a real server warns when asked for more. Exit 0 a ceiling was "
        "found, 1 not even the lowest load passed, 2 bad input.",
    )
    sc.add_argument("profile", nargs="?", help="profile YAML or a shipped profile's name (its load shape)")
    borrow(sc, run, _BORROWED)
    g = sc.add_argument_group("check")
    g.add_argument(
        "--check-workers",
        metavar="N[,N...]",
        help="worker counts to check (default: 1 up to the usable cores)",
    )
    g.add_argument(
        "--threshold-ms", type=float, default=1.0, metavar="MS", help="first-token lag p99 bound (default 1)"
    )
    g.add_argument(
        "--unpaced",
        action="store_true",
        help="run the simulator as fast as its CPU allows (a worst case) instead of in real time",
    )
    g.add_argument(
        "--step-duration", type=float, default=6.0, metavar="S", help="seconds of each load step (default 6)"
    )
    g.add_argument(
        "--max-load", type=float, metavar="X", help="top of the search (default: twice the requested)"
    )
    g.add_argument("--no-save", action="store_true", help="print the result without saving it")
    leave_unset(sc, run)


def cmd_selfcheck(a: argparse.Namespace, path: Any, overrides: dict[str, Any]) -> int:
    import asyncio

    from loadgen.runner import selfcheck, selfcheck_store

    try:
        counts = [int(x) for x in a.check_workers.split(",")] if a.check_workers else None
    except ValueError:
        print(f"loadgen: error: --check-workers {a.check_workers!r}: give numbers, e.g. 1,2", file=sys.stderr)
        return 2
    if counts is not None and any(c < 1 for c in counts):
        print("loadgen: error: --check-workers: each count must be >= 1", file=sys.stderr)
        return 2

    def on_step(s: selfcheck.Step) -> None:
        verdict = "ok  " if s.passed else "FAIL"
        lag = "-" if s.first_token_lag_p99_ms is None else f"{s.first_token_lag_p99_ms:.2f}"
        tps = "-" if s.output_tokens_per_s is None else f"{s.output_tokens_per_s:,.0f}"
        why = f"  ({'; '.join(s.reasons)})" if s.reasons else ""
        line = f"  {s.workers} worker(s)  {s.load:g}  {verdict} first-token lag p99 {lag} ms, {tps} tokens/s"
        print(line + why, file=sys.stderr, flush=True)

    check = selfcheck.SelfCheck(
        path,
        overrides,
        a.set,
        threshold_ms=a.threshold_ms,
        unpaced=a.unpaced,
        step_s=a.step_duration,
        max_load=a.max_load,
        on_step=on_step,
    )
    print(
        f"selfcheck: {check.unit} up to {check.max_load:g}, against the simulator "
        f"({'unpaced' if a.unpaced else 'real time'}), first-token lag p99 <= {a.threshold_ms:g} ms",
        file=sys.stderr,
    )
    result = asyncio.run(check.run(counts))
    for line in table(result):
        print(line)
    print(verdict(result))
    if not a.no_save:
        print(f"saved to {selfcheck_store.save(result)}")
    return 0 if any(r["ceiling"] is not None for r in result["results"]) else 1


def table(result: dict[str, Any]) -> list[str]:
    """One line per worker count: the ceiling, its tokens/s and first-token lag."""
    unit, lines = result["unit"], []
    for r in result["results"]:
        if r["ceiling"] is None:
            lines.append(f"{r['workers']} worker(s): not even the lowest load was driven truthfully")
            continue
        more = " or more (the search's top)" if r["at_least"] else ""
        lines.append(
            f"{r['workers']} worker(s): up to {r['ceiling']:g} {unit}{more} "
            f"({r['tokens_per_s'] or 0:,.0f} tokens/s) with first-token lag p99 "
            f"{r['first_token_lag_p99_ms']:.2f} ms <= {result['threshold_ms']:g} ms"
        )
    return lines


def verdict(result: dict[str, Any]) -> str:
    """What the table means for the load that was asked for."""
    from loadgen.runner.selfcheck import workers_needed

    asked = f"the requested {result['requested']:g} {result['unit']}"
    n = workers_needed(result)
    if n == 1:
        return f"{asked}: one process drives it truthfully"
    if n is not None:
        (r,) = (r for r in result["results"] if r["workers"] == n)
        return f"{asked}: needs --workers {n} (up to {r['ceiling']:g} with {n})"
    found = [r for r in result["results"] if r["ceiling"] is not None]
    if not found:
        return f"{asked}: not even the lowest load was driven truthfully on this machine"
    best = max(found, key=lambda r: r["ceiling"])
    return (
        f"{asked}: above every ceiling found here (highest {best['ceiling']:g} with "
        f"{best['workers']} worker(s)); split it over more cores or machines (--workers, --ray), "
        "or its latencies will hold client delay"
    )
