"""``loadgen capacity``: its flags and its command (the search is ``runner.capacity``): the
highest request rate at which enough requests meet every SLO, and the table of its stages.

Part of the CLI layer: it prints; the library does not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from loadgen.analysis.repeats import TOO_FEW
from loadgen.analysis.saturation import queue_word
from loadgen.analysis.sla import nothing_served
from loadgen.cli.argtypes import duration, parse_sla
from loadgen.cli.borrow import borrow, leave_unset
from loadgen.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_SERVED,
    EXIT_OK,
    EXIT_SLA_FAIL,
    die,
    labels,
    raise_fd_limit,
    resolve_profile_path,
)
from loadgen.cli.overrides import overrides
from loadgen.clock import run_loop
from loadgen.summary.stages import CapacityTwin

if TYPE_CHECKING:  # the runner is imported when the command runs
    from loadgen.runner.capacity_confirm import Confirmation
    from loadgen.runner.capacity_stages import StageMeasure
    from loadgen.summary import Capacity


def add_parser(sub: Any, run: argparse.ArgumentParser) -> None:
    """``loadgen capacity``: the target flags of ``run`` plus the search's own."""
    cp = sub.add_parser(
        "capacity",
        help="find the highest request rate at which a fraction A of requests meet every SLO",
        description="Search the capacity: the highest open-loop (Poisson) request rate at which at "
        "least --attainment of requests meet every per-request SLO (DistServe's goodput). Brackets "
        "by doubling, bisects to --precision, re-measures the boundary; one run folder with every "
        "stage, capacity.json and summary.json's `capacity`. The search proposes a rate (or the "
        "simulator fitted to its stages does: --twin) and a confirming Poisson run at it decides: the "
        "headline is the rate that held. Exit 0 confirmed, 1 no rate confirmed (none met the SLOs, the "
        "budget ran out first, or the client was the bottleneck), 2 bad input or the target could not be "
        "reached, 3 nothing was served, 130 interrupted.",
    )
    cp.add_argument("profile", nargs="?", help="profile YAML or a shipped profile's name (its workload)")
    borrow(
        cp,
        run,
        (
            "--url",
            "--sim",
            "--model",
            "--api-key-env",
            "--seed",
            "--name",
            "--out",
            "--run-id",
            "--repeats",
            "--reset-path",
            "--ui",
            "--no-progress",
        ),
    )
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
        help="measured length of each stage once the boundary is bracketed (default 15s; at least 30 "
        "requests); doubling stages measure 5s",
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
    g.add_argument(
        "--max-stages",
        type=int,
        metavar="N",
        help="stage budget (default 14; 40 with --budget, which then governs)",
    )
    g.add_argument(
        "--budget",
        type=duration,
        metavar="TIME",
        help="wall time for the whole search, e.g. 4m or 20m: stages near the boundary share what is "
        "left (longer stages see the bursts that break a tail SLO: more time, a truer answer); the "
        "search stops, saying so, when the next stage would not fit. Default: no budget",
    )
    g.add_argument(
        "--confirm-duration",
        dest="confirm_s",
        type=duration,
        metavar="S",
        help="measured length of a confirming run at the proposed rate (default: the larger of 2m and "
        "0.4 x --budget)",
    )
    g.add_argument(
        "--twin",
        metavar="PRESET",
        help="the simulator preset the server resembles (<model>-<precision>@<gpu>): fitted to the "
        "search's stages, it proposes the rate to confirm (default: the built-in simulator's own preset, "
        "none for a --url; 'off': the search's highest passing level is confirmed)",
    )
    leave_unset(cp, run)


def cmd_capacity(a: argparse.Namespace) -> int:
    from loadgen.config import ConfigError, load_profile
    from loadgen.runner import capacity
    from loadgen.runner.capacity_repeats import run_capacity_repeated

    # The search sets every stage; the profile lends its workload, target, SLOs and its rate as
    # the start (if it has none, 1 req/s; a sweep's profile gets a nominal length to validate).
    path, sets = resolve_profile_path(a.profile), [*a.set, *labels(a.label)]
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
        return die(f"cannot read profile: {exc}")
    api_key = os.environ.get(profile.target.api_key_env) if profile.target.api_key_env else None
    if profile.target.api_key_env and not api_key:
        return die(f"target.api_key_env names {profile.target.api_key_env}, which is not set")

    quiet = a.no_progress or a.ui == "none"  # --ui none: the result alone

    def on_stage(m: StageMeasure, passed: bool) -> None:
        att = "-" if m.attainment is None else f"{m.attainment:.3f}"
        queue = "  queue growing" if m.over_saturated else ""
        if not quiet:
            print(
                f"  stage {m.stage}: {m.rate:g} req/s  attained {att} of {m.flags.size}  "
                f"{'pass' if passed else 'fail'}{queue}",
                file=sys.stderr,
                flush=True,
            )

    def on_confirm(c: Confirmation) -> None:
        if not quiet:
            verdict = "held" if c.held else f"did not hold: {c.why}"
            print(
                f"  confirm {c.rate:g} req/s for {c.measured_s:.0f} s: {verdict}", file=sys.stderr, flush=True
            )

    def on_status(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    stages = a.max_stages or (40 if a.budget else 14)  # with a budget, time governs

    async def main() -> capacity.CapacityRun:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        search = capacity.run_capacity if profile.load.repeats == 1 else run_capacity_repeated
        return await search(
            profile,
            attainment=a.attainment,
            slos=a.sla,
            start_rate=a.start_rate,
            stage_s=a.capacity_stage_s,
            warmup_s=a.stage_warmup,
            precision=a.precision,
            max_stages=stages,
            max_rate=a.max_rate,
            budget_s=a.budget,
            confirm_s=a.confirm_s,
            twin=a.twin,
            gpu_hour_cost=a.gpu_hour_cost,
            gpu_count=a.gpu_count,
            api_key=api_key,
            stop=stop,
            on_status=on_status,
            on_stage=on_stage,
            on_confirm=on_confirm,
        )

    raise_fd_limit()
    res = run_loop(main())
    cap = res.capacity
    print("\n".join(_capacity_headline(cap)))
    if cap["stopped_because"]:
        print(f"search stopped: {cap['stopped_because']}")
    print("\n".join(_capacity_rows(cap)))
    for line in _repeat_lines(res.summary):
        print(line)
    print(f"results  {res.run_dir / capacity.CAPACITY}")
    if res.summary.get("interrupted"):
        return EXIT_INTERRUPTED
    why = nothing_served(res.summary)
    if why is not None:
        print(f"loadgen: {why}", file=sys.stderr)
        return EXIT_NOTHING_SERVED
    if cap["capacity_rps"] is None:
        print(
            f"loadgen: no rate confirmed: {cap.get('unconfirmed_because') or cap['stopped_because']}",
            file=sys.stderr,
        )
        return EXIT_SLA_FAIL if any(s["counted"] for s in cap["stages"]) else EXIT_BAD_INPUT
    return EXIT_OK


def _capacity_headline(cap: Capacity) -> list[str]:
    """'31.2 req/s sustainable: a 2-minute run at it met 99.6 % of requests' SLOs (A = 99 %);
    lower 95 % bound 99.3 % (block bootstrap over 10 s blocks)', its goodput and cost; or that
    none was confirmed; then the cliff, labelled as where attainment crosses A, and who proposed."""
    n = len(cap["stages"])
    took = f" in {cap['elapsed_s']:.0f} s" if cap.get("elapsed_s") is not None else ""
    if cap["capacity_rps"] is None:
        lines = [
            f"no rate confirmed for {cap['attainment']:g} of requests, from {n} stages{took}: "
            f"{cap.get('unconfirmed_because') or 'no rate met the SLOs'}"
        ]
    else:
        parts = [cap.get("statement") or f"{_num(cap['capacity_rps'])} req/s sustainable"]
        lo, hi = cap["ci95"]
        if lo is not None and hi is not None:
            parts.append(f"95% t interval over the searches {_num(lo)}-{_num(hi)}")
        elif TOO_FEW in (cap.get("method") or ""):
            parts.append(TOO_FEW)
        if cap["goodput_rps"] is not None:
            parts.append(f"goodput {_num(cap['goodput_rps'])} req/s")
        if cap["usd_per_million_output_tokens"] is not None:
            parts.append(f"${cap['usd_per_million_output_tokens']:.2f} / 1M output tokens")
        lines = [", ".join(parts) + f"; from {n} stages{took}"]
    cliff = cap.get("cliff")
    b_lo, b_hi = cliff["bracket"] if cliff else (None, None)
    c_lo, c_hi = cliff["ci95"] if cliff else (None, None)
    if cliff and (b_lo is not None or b_hi is not None):
        cross = cliff["crossing_rps"]
        lines.append(
            f"the cliff (where attainment crosses {cap['attainment']:g}, not a rate to provision at): "
            + (f"near {_num(cross)} req/s, " if cross is not None else "")
            + (
                f"bracket {_num(b_lo)}-{_num(b_hi)} req/s"
                if b_lo is not None and b_hi is not None
                else f"above {_num(b_lo)} req/s (no failing level counted)"
                if b_lo is not None
                else f"below {_num(b_hi)} req/s (no passing level)"
            )
            + ", 95% CI "
            f"{_num(c_lo) if c_lo is not None else '0'}-{_num(c_hi) if c_hi is not None else 'open'}"
        )
    lines += _proposal_lines(cap)
    return lines


def _proposal_lines(cap: Capacity) -> list[str]:
    """Who proposed the first rate confirmed, and how far it was from the one that held."""
    p = cap.get("proposal")
    if not p or p.get("rate") is None:
        return []
    twin = p.get("twin") or CapacityTwin()
    off = p.get("above_confirmed")
    vs = "" if off is None else f" ({off:+.1%} vs the confirmed rate)"
    if p["by"] == "twin":
        fit = ", ".join(f"{k} {v:.4g}" for k, v in (twin.get("params") or {}).items())
        fitted = f"{twin.get('preset')} fitted to {twin.get('stages_fitted')} stages: {fit}"
        within = f"residuals within {twin.get('max_residual_pct')} %"
        return [f"proposed by the twin ({fitted}; {within}): {_num(p['rate'])} req/s{vs}"]
    why = f"; the twin could not: {twin['why']}" if twin.get("why") else ""
    return [f"proposed by the search (its highest passing level): {_num(p['rate'])} req/s{vs}{why}"]


def _capacity_rows(cap: Capacity) -> list[str]:
    """The stage table in the order run: level asked, rate offered ("n/c": not counted, the
    client lagged), and the queue (a stage whose queue grew fails whatever it attained)."""
    cols = (
        "stage",
        "kind",
        "level/s",
        "offered/s",
        "attained",
        "n",
        "",
        "tput/s",
        "TTFT p99",
        "TPOT p99",
        "queue",
    )
    rows = ["  ".join(f"{c:>8}" for c in cols)]
    for s in cap["stages"]:
        verdict = ("pass" if s["passed"] else "fail") if s["counted"] else "n/c"
        att = "-" if s["attainment"] is None else f"{s['attainment']:.3f}"
        queue = queue_word(s.get("saturation"))
        cells = (
            s["stage"],
            s.get("kind", ""),
            _num(s["rate"]),
            _num(s["offered_rps"]),
            att,
            s["requests"],
            verdict,
            _num(s["throughput_rps"]),
            _num(s["ttft_p99_ms"]),
            _num(s["tpot_p99_ms"]),
            queue,
        )
        rows.append("  ".join(f"{c:>8}" for c in cells))
    return rows


def _repeat_lines(summary: Any) -> list[str]:
    """A repeated search's capacity, search by search, and over them (nothing without repeats)."""
    block = summary.get("repeats")
    if not block:
        return []
    fig = next(f for f in block["figures"] if f["figure"] == "capacity_rps")
    each = ", ".join(f"{r['path']} {_num(v)}" for r, v in zip(block["runs"], fig["values"]))
    iv = "-" if fig["low"] is None else f"{_num(fig['low'])}-{_num(fig['high'])}"
    return [
        f"over {block['completed']} of {block['count']} repeated searches: capacity_rps mean "
        f"{_num(fig['mean'])} req/s, sd {_num(fig['sd'])}, 95% t interval {iv} ({each})"
    ]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"
