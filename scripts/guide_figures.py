"""The figures the guides and the README quote from shipped commands, produced by running them.

A page that says "144 measured requests" where its command measures 160 is wrong in a way no
reader can see, and nothing stops it drifting each time a default moves. So each quoted figure
is registered here once: the page, the words that lead to it, the command that produces it
(run once however many figures it feeds), how the figure is read from that run, and how far a
rerun may move it (a count not at all; a time or an energy with the machine's jitter). Then

    python scripts/guide_figures.py            # run the commands, print each figure's check
    python scripts/guide_figures.py --write    # and put the fresh figures on the pages

exits 1 when a page's figure is outside its tolerance of the run's, or when a quote's words are
no longer on its page (the page changed under it: register it anew). The slow test
``tests/slow/test_guide_figures.py`` runs the check, so a guide cannot drift from what its
command prints. Every command runs against the built-in simulator on 127.0.0.1.

Not registered, on purpose: the trust guide's measurement-error line and `selfcheck` ceilings
(docs/guides/trust.md). They measure this machine's client, not the command: how many streams a
core keeps under 1 ms of first-token lag moves with the CPU and with what else runs beside it, so
the page states the machine they were measured on, and `loadgen selfcheck` is how a reader gets
their own.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"(-?\d[\d,]*(?:\.\d+)?)"


@dataclass(frozen=True)
class Command:
    """A shipped command, as the page shows it, and what of its output the figures read."""

    name: str
    argv: tuple[str, ...]  # after `loadgen`; the script adds where its output goes
    reads: str = "run"  # a run's folder (summary.json), an "experiment"'s, or "stdout" only


@dataclass(frozen=True)
class Quote:
    """One figure on one page: ``lead`` is a regular expression for the words just before it
    (one match on the page), ``value`` reads it from the command's output, ``rel`` / ``abs``
    bound how far the page may be from it, ``fmt`` writes it as the page does."""

    page: str
    lead: str
    command: str
    value: Callable[[Output], float]
    fmt: str
    rel: float = 0.0
    abs: float = 0.0
    trail: str = ""  # a regular expression for the words right after it, where the lead is not enough


@dataclass(frozen=True)
class Output:
    """What a command left: its summary.json and cost.json (a run), its printed lines, and
    how long it took from start to exit (what a reader waits)."""

    summary: dict[str, Any]
    cost: dict[str, Any]
    stdout: str
    wall_s: float = 0.0
    cells: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # an experiment's, by config

    def at(self, *path: str | int) -> Any:
        node: Any = self.summary
        for key in path:
            node = node[key]
        return node


@dataclass(frozen=True)
class Check:
    quote: Quote
    line: int  # 1-based line on the page; 0 when the lead was not found
    page_value: float | None
    run_value: float
    ok: bool
    why: str


QS = "quickstart-energy"
SPEC = "quickstart-speculative"
SWEEP_H100 = "experiments-sweep-h100"
FIT_H100 = "sim-fit-experiments-sweep"
PREFIX, NO_PREFIX_CACHE = "chat-shared-prefix", "chat-shared-prefix-uncached"
MULTITURN, REPLAY = "multiturn", "replay-mooncake"
LEVERS, LEVERS_DRY = "levers-experiment", "levers-dry-run"  # the experiment: about 5 minutes
CAPACITY, AT_CAPACITY = "capacity-cliff", "run-at-capacity"  # 4 min, then 3 min at its answer
_PREFIX = "run profiles/chat.yaml --set workload.prefix.shared_tokens=2000 --set workload.prefix.groups=8"

# The commands as their pages show them (`loadgen` dropped), each run once.
COMMANDS = (
    Command(
        QS,
        tuple(
            "run profiles/quickstart.yaml --set telemetry.price_per_kwh=0.15 "
            "--label gpu_hour_cost=2.5".split()
        ),
    ),
    Command(
        SPEC,
        tuple(
            "run profiles/quickstart.yaml --set target.continuous_usage_stats=true "
            "--set sim.num_speculative_tokens=3 --set sim.spec_acceptance=0.6".split()
        ),
    ),
    Command(
        SWEEP_H100,
        tuple(
            "run quickstart --sim llama3-8b-fp16@h100 --sweep concurrency=1..64:x2 "
            "--stage-duration 4s".split()
        ),
    ),
    Command(PREFIX, tuple(_PREFIX.split())),
    Command(NO_PREFIX_CACHE, (*_PREFIX.split(), "--set", "sim.prefix_caching=false")),
    Command(MULTITURN, ("run", "profiles/multiturn.yaml")),
    Command(REPLAY, ("run", "profiles/replay.yaml")),
    # `sim fit` of the sweep's folder: {name} is the folder of the run of that name above, {out}
    # the script's scratch folder (nothing is written into the checkout)
    Command(
        FIT_H100,
        (
            "sim",
            "fit",
            "{" + SWEEP_H100 + "}",
            "--preset",
            "llama3-8b-fp16@h100",
            "--preset-file",
            "{out}/fitted.yaml",
        ),
        reads="stdout",
    ),
    Command(LEVERS, ("experiment", "experiments/levers.yaml"), reads="experiment"),
    Command(
        CAPACITY,
        (
            "capacity",
            "chat",
            "--sim",
            "llama3-8b-fp16@h100",
            "--sla",
            "p99 ttft_ms<700, p99 tpot_ms<50",
            "--attainment",
            "0.99",
            "--budget",
            "4m",
        ),
    ),
    # the plain run at the rate the page prints (not at this check's capacity: the page's claim is
    # that its own figure holds)
    Command(AT_CAPACITY, tuple("run chat --sim llama3-8b-fp16@h100 --rate 31.8 --duration 3m".split())),
    Command(LEVERS_DRY, ("experiment", "experiments/levers.yaml", "--dry-run"), reads="stdout"),
)


def _fitted(name: str) -> Callable[[Output], float]:
    """A fitted parameter from `sim fit`'s printed table (``  name   value  ...``)."""

    def read(o: Output) -> float:
        m = re.search(rf"^\s*{name}\s+{NUMBER}", o.stdout, re.M)
        if m is None:
            raise ValueError(f"`sim fit` printed no {name}")
        return float(m[1])

    return read


def _read(spec: str) -> Callable[[Output], float]:
    """``a.b.0.c`` into summary.json, ``cost:a.b`` into cost.json, ``fit:name`` from `sim fit`'s
    table, ``wall:`` the command's time to exit; ``*100`` or ``/1e9`` after it scales (a
    fraction as a percentage, bytes as GB)."""
    path, _, scale = spec.partition(" ")
    factor = 1.0 if not scale else (float(scale[1:]) if scale[0] == "*" else 1 / float(scale[1:]))
    if path == "wall:":
        return lambda o: o.wall_s
    if path.startswith("fit:"):
        fitted = _fitted(path.removeprefix("fit:"))
        return lambda o: fitted(o) * factor
    source, _, dotted = path.rpartition(":")
    keys = [int(k) if k.isdigit() else k for k in dotted.split(".")]

    def read(o: Output) -> float:
        node: Any = o.cost if source == "cost" else o.summary
        for key in keys:
            node = node[key]
        return float(node) * factor

    return read


def _turns(o: Output) -> list[float]:
    """Turns 2 to 5's TTFT p50s of a sessions run."""
    return [t["ttft_ms"]["p50"] for t in o.summary["sessions"]["by_turn"][1:5]]


def _quotes(page: str, rows: Sequence[tuple[str, str, str, str, str]]) -> tuple[Quote, ...]:
    """A page's quotes from rows of (lead, command, what to read, format, tolerance): the
    tolerance ``exact``, ``3%`` of the run's figure, or ``±1`` in the figure's unit."""
    out = []
    for lead, command, spec, fmt, tol in rows:
        rel = float(tol[:-1]) / 100 if tol.endswith("%") else 0.0
        absolute = float(tol[1:]) if tol.startswith("±") else 0.0
        out.append(Quote(page, lead, command, _read(spec), fmt, rel, absolute))
    return tuple(out)


ENERGY, GPU0 = "telemetry.energy.", "telemetry.gpus.0."
_ROW = r"\| 0 NVIDIA H100-SXM5-80GB \| "  # the report's GPU table, a cell at a time
_SERVER = "speculative.server."


def _electricity_share(o: Output) -> float:
    """The energy's cost as a percentage of the GPU-hour's, per million output tokens."""
    return (
        100
        * o.at("telemetry", "energy", "usd_per_million_output_tokens")
        / o.cost["usd_per_million_output_tokens"]
    )


# The mean of about 11 one-second power readings, each an instant: a busy machine puts more of
# them between two engine steps (408 to 439 W in runs here), where the energy counter does not move.
POWER_READINGS = "12%"
_TELEMETRY = (
    # the quickstart with energy: the console's line, the report's two tables, the cost
    (r"one simulated H100, ", QS, "conditions.load.concurrency", "{:.0f}", "exact"),
    (r"\d+ users, ", QS, "counts.ok", "{:.0f}", "exact"),
    (r"measured\s+requests over ", QS, "window.seconds", "{:.1f}", "5%"),
    (r"energy      ", QS, ENERGY + "j_per_output_token", "{:.3f}", "3%"),
    (r"J/output token   ", QS, ENERGY + "output_tokens_per_j", "{:.2f}", "3%"),
    (r"output tok/J   ", QS, ENERGY + "mean_watts", "{:.0f}", "3%"),
    (_ROW, QS, GPU0 + "utilization_mean *100", "{:.1f}", "±1"),
    (_ROW + r"[\d.]+% \| ", QS, GPU0 + "memory_used_mean_bytes /1e9", "{:.2f}", "2%"),
    (_ROW + r"[\d.]+% \| [\d.]+ \| ", QS, GPU0 + "memory_used_peak_bytes /1e9", "{:.2f}", "2%"),
    (_ROW + r"[\d.]+% \| [\d.]+ \| [\d.]+ \| ", QS, GPU0 + "power_mean_w", "{:.0f}", POWER_READINGS),
    (_ROW + r"[\d.]+% \| [\d.]+ \| [\d.]+ \| [\d.]+ \| ", QS, GPU0 + "energy_j", "{:,.0f}", "5%"),
    (r"\| joules per output token \| ", QS, ENERGY + "j_per_output_token", "{:.3f}", "3%"),
    (r"\| joules per token \(input \+ output\) \| ", QS, ENERGY + "j_per_total_token", "{:.3f}", "3%"),
    (r"\| output tokens per joule \| ", QS, ENERGY + "output_tokens_per_j", "{:.2f}", "3%"),
    (r"\| mean GPU power \| ", QS, ENERGY + "mean_watts", "{:.0f}", "3%"),
    (r"at \$0\.15/kWh \| \$", QS, ENERGY + "usd_per_million_output_tokens", "{:.5f}", "3%"),
    (r"beside \$", QS, "cost:usd_per_million_output_tokens", "{:.4f}", "3%"),
    (r"mean of the power readings \(", QS, GPU0 + "power_mean_w", "{:.0f}", POWER_READINGS),
    (r"energy\s+counter's mean \(", QS, ENERGY + "mean_watts", "{:.0f}", "3%"),
    # speculative decoding on the quickstart: the server's counters and the stream's events
    (r"acceptance 0\.6 run of the quickstart's ", SPEC, "counts.ok", "{:.0f}", "exact"),
    (r"requests at concurrency ", SPEC, "conditions.load.concurrency", "{:.0f}", "exact"),
    (r"requests at concurrency \d+: ", SPEC, _SERVER + "acceptance_rate", "{:.3f}", "5%"),
    (r"draft\s+tokens accepted, ", SPEC, _SERVER + "mean_acceptance_length", "{:.2f}", "3%"),
    (r"per\s+position ", SPEC, _SERVER + "per_position.0", "{:.2f}", "±0.03"),
    (r"per\s+position [\d.]+, ", SPEC, _SERVER + "per_position.1", "{:.2f}", "±0.03"),
    (r"per\s+position [\d.]+, [\d.]+, ", SPEC, _SERVER + "per_position.2", "{:.2f}", "±0.03"),
    (r"and the\s+stream's \(", SPEC, "speculative.stream.tokens_per_event", "{:.2f}", "3%"),
    (r"tokens an event, ", SPEC, "speculative.stream.multi_token_events *100", "{:.0f}", "±4"),
)
_PREFIXES = (
    (r"command\s+above gives TTFT p50 ", PREFIX, "metrics.ttft_ms.p50", "{:.1f}", "8%"),
    (r"with its prefix cache and ", NO_PREFIX_CACHE, "metrics.ttft_ms.p50", "{:.1f}", "5%"),
    (r"\(`server.prefix_cache`: ", PREFIX, "server.prefix_cache.hit_rate *100", "{:.1f}", "±2"),
    (r"turn 1 p50 ", MULTITURN, "sessions.by_turn.0.ttft_ms.p50", "{:.1f}", "15%"),
    (r"turn 1 p50 [\d.]+ ms \(p90 ", MULTITURN, "sessions.by_turn.0.ttft_ms.p90", "{:.1f}", "15%"),
)
_TRAFFIC = (
    (
        r"first 30 s\) designs ",
        REPLAY,
        "conditions.traffic.trace.designed_prefix_reuse *100",
        "{:.1f}",
        "±0.1",
    ),
    (r"`/metrics` hit rate on it is ", REPLAY, "server.prefix_cache.hit_rate *100", "{:.1f}", "±1"),
)
# `sim fit` of the experiments guide's own sweep (4-s real-time stages: the fitted bandwidth
# moved from 0.801 to 0.784 between two runs here)
_FIT = r"guide's own sweep\s+\(c = 1 to 64\) "
_README = (
    (_FIT, FIT_H100, "fit:bandwidth_efficiency", "{:.3f}", "4%"),
    (_FIT + r"[\d.]+ and ", FIT_H100, "fit:flops_efficiency", "{:.3f}", "4%"),
)
# The capacity guide's transcript and the plain run at its answer. A confirmed rate is a decision
# on one noisy search, not an estimate: between 0.88 and 1.0 x the truth by the confirmation's
# rule (docs/guides/capacity.md), so 10 %. Not held: the cliff line's bracket (whether the client
# kept up at the 64 req/s screen depends on how busy this 2-core machine is) and the twin's fitted
# parameters and residual (a fit to four short stages).
_CAP = "capacity."
_CAPACITY = (
    (r"(?m)^    ", CAPACITY, _CAP + "capacity_rps", "{:.1f}", "10%"),
    (r"req/s sustainable: a ", CAPACITY, _CAP + "confirm_s /60", "{:.0f}", "exact"),
    (r"-minute run at it met ", CAPACITY, _CAP + "attainment_at_capacity *100", "{:.0f}", "±1"),
    (r"lower 95 % bound ", CAPACITY, _CAP + "lower_bound_at_capacity *100", "{:.1f}", "±1"),
    (r"10 s blocks\), goodput ", CAPACITY, _CAP + "goodput_rps", "{:.1f}", "10%"),
    # the stages' time is bounded by the budget, not fixed by it: the search stops when its share
    # is spent, and the confirmation takes what its run and drain take, below its reserve (210 to
    # 239 s in runs here)
    (r"stages in ", CAPACITY, _CAP + "elapsed_s", "{:.0f}", "15%"),
    (r"search's share of the ", CAPACITY, _CAP + "budget_s", "{:.0f}", "exact"),
    (r"fitted to ", CAPACITY, _CAP + "proposal.twin.stages_fitted", "{:.0f}", "±1"),
    (r"residuals within [\d.]+ %\): ", CAPACITY, _CAP + "proposal.twin.rate", "{:.1f}", "10%"),
    (r"Measured here on [\d-]+: ", CAPACITY, "wall:", "{:.0f}", "20%"),  # 212 to 244 s here
    (r"the report take the rest\), and ", CAPACITY, _CAP + "capacity_rps /32.7", "{:.3f}", "10%"),
    (r"the SLOs for ", AT_CAPACITY, "metrics.goodput.attained_fraction *100", "{:.1f}", "±1"),
    (r"\(p99 TTFT ", AT_CAPACITY, "metrics.ttft_ms.p99", "{:.0f}", "35%"),
    (r"p99 TPOT ", AT_CAPACITY, "metrics.tpot_ms.p99", "{:.1f}", "10%"),
)


def _held_back(o: Output) -> float:
    """The seconds the search held back of its budget for the confirmation, as it said when it
    stopped (the plan's reserve: a confirming run's warm-up, measured part and drain)."""
    m = re.search(r"(\d+) s held back", o.summary["capacity"]["stopped_because"] or "")
    if m is None:
        raise ValueError(f"the search did not stop on its budget: {o.summary['capacity']['stopped_because']}")
    return float(m[1])


_SESSIONS = "docs/guides/prefixes-sessions.md"
_EXPERIMENTS = "docs/guides/experiments.md"
# The levers ranking as the page prints it: each configuration's capacity and cost where its
# label is, and its rank to one place (neighbours the ranking cannot tell apart may swap).
LEVER_LABELS = tuple(
    f"sim gpu={gpu} precision={precision} max_num_seqs={cap}"
    for gpu in ("h100", "a100")
    for precision in ("fp8", "fp16")
    for cap in (64, 16)
)


def _lever(label: str, read: Callable[[dict[str, Any]], float]) -> Callable[[Output], float]:
    def value(o: Output) -> float:
        (row,) = [r for r in o.summary["ranking"]["rows"] if r["label"] == label]
        return read(row)

    return value


def _dry_run_minutes(o: Output) -> float:
    m = re.search(r"expected ([\d.]+) min", o.stdout)
    if m is None:
        raise ValueError("the dry run printed no expected time")
    return float(m[1])


def _at_32_users(
    gpu: str, cap: int, metric: str, end: Callable[[list[float]], float]
) -> Callable[[Output], float]:
    """One end of the range of a stage figure at 32 users over a GPU's and a batch cap's cells
    (both precisions, every repeat: six runs)."""

    def value(o: Output) -> float:
        figures = [
            stage["metrics"][metric]["p99"]
            for config, runs in o.cells.items()
            if f"gpu={gpu}-" in config and config.endswith(f"max_num_seqs={cap}")
            for run in runs
            for stage in run["stages"]
            if stage["name"] == "c=32"
        ]
        return end(figures)

    return value


def _physics() -> tuple[Quote, ...]:
    """The "read with the physics" paragraph's ranges at 32 users. The ends of a range over six
    runs move the most between experiments (up to 16 % here): 25 %."""
    out = []
    for lead, gpu, cap, metric in (
        (r"queue for a slot \(p99 TTFT ", "h100", 16, "ttft_ms"),
        (r"keeps\s+p99 TTFT at ", "h100", 64, "ttft_ms"),
        (r"the cap of 16 queues \(p99 TTFT ", "a100", 16, "ttft_ms"),
        (r"take p99 TPOT\s+to ", "a100", 64, "tpot_ms"),
    ):
        out.append(Quote(_EXPERIMENTS, lead, LEVERS, _at_32_users(gpu, cap, metric, min), "{:.0f}", rel=0.25))
        out.append(
            Quote(
                _EXPERIMENTS, lead + r"\d+-", LEVERS, _at_32_users(gpu, cap, metric, max), "{:.0f}", rel=0.25
            )
        )
    return tuple(out)


def _levers() -> tuple[Quote, ...]:
    out = [
        Quote(_EXPERIMENTS, r"loadgen experiment levers  \(", LEVERS, lambda o: o.wall_s, "{:.0f}", rel=0.35),
        Quote(_EXPERIMENTS, r"the expected time \(", LEVERS_DRY, _dry_run_minutes, "{:.1f}", abs=0.05),
    ]
    for label in LEVER_LABELS:
        at = re.escape(label) + r"\s+capacity "
        cost = at + r"[\d.]+ req/s \(95% CI [\d.]+-[\d.]+\)\s+\$"
        out += [
            Quote(
                _EXPERIMENTS,
                r"(?m)^ {6}",
                LEVERS,
                _lever(label, lambda r: r["rank"]),
                "{:.0f}",
                abs=1,
                trail=r"\. " + re.escape(label) + " ",
            ),
            Quote(
                _EXPERIMENTS,
                at,
                LEVERS,
                _lever(label, lambda r: r["figures"]["capacity_rps"]["mean"]),
                "{:.1f}",
                rel=0.12,
            ),
            Quote(
                _EXPERIMENTS,
                cost,
                LEVERS,
                _lever(label, lambda r: r["figures"]["usd_per_million_output_tokens"]["mean"]),
                "{:.2f}",
                rel=0.12,
            ),
        ]
    return tuple(out)


QUOTES = (
    *_quotes("docs/guides/telemetry.md", _TELEMETRY),
    Quote(
        "docs/guides/telemetry.md", r"the electricity is about ", QS, _electricity_share, "{:.0f}", abs=0.6
    ),
    *_quotes("docs/guides/profiles.md", ((r"16 chat users, ~", QS, "wall:", "{:.0f}", "35%"),)),
    *_quotes(_SESSIONS, _PREFIXES),
    Quote(_SESSIONS, r"turns 2-5 p50 ", MULTITURN, lambda o: min(_turns(o)), "{:.1f}", rel=0.15),
    Quote(_SESSIONS, r"turns 2-5 p50 [\d.]+ to ", MULTITURN, lambda o: max(_turns(o)), "{:.1f}", rel=0.15),
    *_quotes("docs/guides/traffic.md", _TRAFFIC),
    *_quotes("README.md", _README),
    *_quotes("docs/guides/capacity.md", _CAPACITY),
    Quote(
        "docs/guides/capacity.md",
        r"goodput [\d.]+ req/s; from ",
        CAPACITY,
        lambda o: len(o.summary["capacity"]["stages"]),
        "{:.0f}",
        abs=1,
    ),
    Quote(
        "docs/guides/capacity.md",
        r"\(",
        CAPACITY,
        _held_back,
        "{:.0f}",
        rel=0.05,
        trail=r" s held back to confirm",
    ),
    Quote(  # the attainment's denominator: ok + failed measured requests
        "docs/guides/capacity.md",
        r"% of its ",
        AT_CAPACITY,
        lambda o: o.at("counts", "ok") + o.at("counts", "failed"),
        "{:,.0f}",
        rel=0.03,
    ),
    *_levers(),
    *_physics(),
)


def run_commands(commands: Sequence[Command], out: Path, log: Callable[[str], None]) -> dict[str, Output]:
    """Each command once, in order (a later one may name an earlier run's folder as ``{name}``)."""
    outputs: dict[str, Output] = {}
    folders: dict[str, str] = {"out": str(out)}
    for c in commands:
        argv = [a.format(**folders) for a in c.argv]
        extra = {
            "run": ["--out", str(out / c.name), "--ui", "none"],
            "experiment": ["--out", str(out / c.name)],
        }
        extra_args = extra.get(c.reads, [])
        log(f"$ loadgen {' '.join(argv)}")
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "loadgen", *argv, *extra_args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise SystemExit(f"`loadgen {' '.join(argv)}` exited {done.returncode}:\n{done.stderr[-3000:]}")
        summary: dict[str, Any] = {}
        cost: dict[str, Any] = {}
        if c.reads != "stdout":
            (run_dir,) = (out / c.name).iterdir()
            folders[c.name] = str(run_dir)
            summary = json.loads((run_dir / f"{'summary' if c.reads == 'run' else c.reads}.json").read_text())
            if (run_dir / "cost.json").exists():
                cost = json.loads((run_dir / "cost.json").read_text())
        cells: dict[str, list[dict[str, Any]]] = {}
        if c.reads == "experiment":
            for path in sorted(Path(folders[c.name]).glob("*/repeat-*/summary.json")):
                cells.setdefault(path.parent.parent.name, []).append(json.loads(path.read_text()))
        outputs[c.name] = Output(summary, cost, done.stdout, time.monotonic() - started, cells)
    return outputs


def _after(q: Quote) -> str:
    return f"(?={q.trail})" if q.trail else ""


def check(quotes: Sequence[Quote], outputs: dict[str, Output], pages: dict[str, str]) -> list[Check]:
    """Each quote against its command's output: the figure on the page after its lead."""
    checks = []
    for q in quotes:
        text = pages[q.page]
        run_value = float(q.value(outputs[q.command]))
        found = list(re.finditer(q.lead + NUMBER + _after(q), text))
        if len(found) != 1:
            why = (
                "its lead is not on the page" if not found else f"its lead is on the page {len(found)} times"
            )
            checks.append(Check(q, 0, None, run_value, False, why))
            continue
        m = found[0]
        line = text.count("\n", 0, m.start(1)) + 1
        page_value = float(m[1].replace(",", ""))
        bound = max(q.abs, q.rel * abs(run_value))
        printed = float(q.fmt.format(run_value).replace(",", ""))
        ok = abs(page_value - run_value) <= bound or page_value == printed
        why = "" if ok else f"the run's {q.fmt.format(run_value)} is beyond ±{bound:.4g} of the page's"
        checks.append(Check(q, line, page_value, run_value, ok, why))
    return checks


def write(quotes: Sequence[Quote], outputs: dict[str, Output], pages: dict[str, str]) -> dict[str, str]:
    """The pages with every quoted figure replaced by the run's, written as the page writes it."""
    new = dict(pages)
    for q in quotes:
        figure = q.fmt.format(float(q.value(outputs[q.command])))
        m = re.search(q.lead + NUMBER + _after(q), new[q.page])
        if m is not None:  # a lead not on its page: the check says so
            new[q.page] = new[q.page][: m.start(1)] + figure + new[q.page][m.end(1) :]
    return new


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="put the runs' figures on the pages")
    ap.add_argument(
        "--only", metavar="NAMES", help="run only these commands (comma-separated) and check their figures"
    )
    ap.add_argument("--skip", metavar="NAMES", help="run every command but these (comma-separated)")
    args = ap.parse_args(argv)
    names = [c.name for c in COMMANDS]
    chosen = set(args.only.split(",")) if args.only else set(names)
    chosen -= set(args.skip.split(",")) if args.skip else set()
    if unknown := sorted(chosen - set(names)):
        ap.error(f"no command {unknown[0]!r}; the commands: {', '.join(names)}")
    commands = [c for c in COMMANDS if c.name in chosen]
    quotes = [q for q in QUOTES if q.command in chosen]
    pages = {q.page: (ROOT / q.page).read_text() for q in quotes}
    with tempfile.TemporaryDirectory(prefix="guide-figures-") as tmp:
        outputs = run_commands(commands, Path(tmp), lambda s: print(s, file=sys.stderr))
    if args.write:
        for page, text in write(quotes, outputs, pages).items():
            if text != pages[page]:
                (ROOT / page).write_text(text)
        pages = {q.page: (ROOT / q.page).read_text() for q in quotes}
    checks = check(quotes, outputs, pages)
    for c in checks:
        mark = "ok  " if c.ok else "FAIL"
        page = "—" if c.page_value is None else f"{c.page_value:g}"
        run = c.quote.fmt.format(c.run_value)
        print(f"{mark} {c.quote.page}:{c.line}  page {page}  run {run}  {c.why}".rstrip())
    bad = sum(not c.ok for c in checks)
    print(f"{len(checks) - bad} of {len(checks)} quoted figures agree with their commands")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
