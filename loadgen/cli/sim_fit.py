"""``loadgen sim fit RUN_DIR``: fit the simulator to a measured sweep, write the twin's preset
file and print the fit's residuals per stage (the fit itself: ``loadgen/analysis/sim_fit.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from loadgen.analysis.sim_fit import (
    FITTABLE,
    LATENCY,
    MAX_RESIDUAL_PCT,
    MAX_RESIDUAL_SPREADS,
    METRICS,
    MIN_SENSITIVITY,
    PARAMS,
    Fit,
    FitError,
    FitRejected,
    fit,
    read_run,
)
from loadgen.sim import SimConfig

_HEADERS = {
    "ttft_p50_ms": "TTFT p50",
    "ttft_p99_ms": "TTFT p99",
    "tpot_p50_ms": "TPOT p50",
    "output_tokens_per_s": "out tok/s",
}


def add_parser(sim_sub: Any) -> None:
    """``loadgen sim fit``, under ``loadgen sim``'s subcommands."""
    f = sim_sub.add_parser(
        "fit",
        help="fit the simulator's efficiencies to a measured sweep and write a preset file",
        description="Fit bandwidth_efficiency, flops_efficiency and step_overhead_ms to a run's stages "
        "(each replayed request by request in virtual time; least squares on log TTFT p50 and "
        "p99, TPOT p50 and output tokens/s, each weighed by its spread; needs loadgen[fit]), copy "
        "the KV blocks the server reported, write the twin's preset file and print the residuals "
        f"per stage. A twin that misses a stage's figure by more than {MAX_RESIDUAL_PCT:g} %% and "
        f"more than {MAX_RESIDUAL_SPREADS:g} of its spreads is rejected (exit 1, nothing written). "
        "Serve the twin with `loadgen sim --preset-file FILE`.",
    )
    f.add_argument("run_dir", help="a run directory of a sweep, multi-stage or capacity run")
    f.add_argument(
        "--preset",
        help="the base <model>-<precision>@<gpu> (default: the run's own, when the simulator served it)",
    )
    f.add_argument("--preset-file", default="fitted.yaml", help="write the preset file here")
    f.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a simulator field the twin shares with the server and no run records, e.g. its "
        "scheduler: --set max_num_batched_tokens=2048 --set kv_allocation=on_demand (vLLM's "
        "defaults on an A100 or a CPU); repeatable",
    )
    f.add_argument(
        "--params",
        default=None,
        help=f"the parameters to fit, comma-separated, of {', '.join(FITTABLE)}; the others keep "
        f"the preset's defaults. Default: {','.join(PARAMS)}, each the stages do not identify "
        "kept at the preset's value and named; named here, one they do not identify is refused. "
        "Add seq_overhead_ms for a server whose TPOT grows with the batch faster than its KV "
        "reads explain (a CPU build)",
    )


def cmd_fit(a: argparse.Namespace) -> int:
    names = tuple(n.strip() for n in (a.params or ",".join(PARAMS)).split(",") if n.strip())
    if len(set(names)) != len(names):
        raise FitError(f"--params: {a.params!r} names a parameter twice; valid: {', '.join(FITTABLE)}")
    from loadgen.config import parse_set  # one parser for --set values everywhere

    settings = dict(parse_set(raw) for raw in a.set)
    try:
        result = fit(read_run(a.run_dir, a.preset, settings), names, drop_weak=a.params is None)
    except FitRejected as rejected:
        # the residuals are what the user needs to see which stage the twin cannot reproduce;
        # no preset file is written: a twin that misses its own stages is not one
        print(render(rejected.fit))
        print(f"loadgen: {rejected} (nothing written)")
        return 1
    text = yaml.safe_dump(result.document(), sort_keys=False, default_flow_style=None)
    Path(a.preset_file).write_text(text, encoding="utf-8")
    print(render(result))
    print(f"wrote {a.preset_file}; serve the twin with: loadgen sim --preset-file {a.preset_file}")
    return 0


def render(result: Fit) -> str:
    """The fitted parameters and, per stage, measured / predicted / residual of each metric."""
    src = result.source
    lines = [f"fit of {src.run_dir} on {src.base['preset']}"]
    fields = SimConfig.from_dict(result.config_fields()).model_dump()
    for name in result.params:
        lo, hi = result.intervals[name]
        lines.append(f"  {name:<21} {result.params[name]:.4g}   (95 % interval {lo:.4g} .. {hi:.4g})")
    # Bounded at 0: a fit that lands on the bound leaves float noise (2e-12), printed as 0.000.
    lines.append(f"  {LATENCY:<21} {result.request_latency_ms:.3f}   (client-to-engine, not simulated)")
    lines.append(f"  kv capacity           {src.kv_source or 'not reported: from the preset memory'}")
    for name, sens in result.dropped.items():
        lines.append(
            f"  {name:<21} kept at the preset's {fields[name]:.4g}: these stages do not identify it "
            f"(10 % moves them {sens / 10:.2g} of their spread, {MIN_SENSITIVITY / 10:g} needed)"
        )
    head = f"{'stage':<10}{'load':>7}{'isl':>6}{'osl':>6}"
    for m in METRICS:
        head += f"  {_HEADERS[m] + ' meas':>15}{'pred':>10}{'resid':>8}"
    lines += ["", head]
    for s, p, r in zip(src.stages, result.predicted, result.residuals_pct()):
        row = f"{s.name:<10}{s.load:>7}{s.isl:>6}{s.osl:>6}"
        for m in METRICS:
            row += f"  {s.measured[m]:>15.4g}{p[m]:>10.4g}{r[m]:>+7.1f}%"
        lines.append(row)
    lines += [f"left out {why}" for why in src.skipped]
    lines.append(
        f"worst residual {result.max_residual_pct():.1f} % (a fit that misses a figure by more than "
        f"{MAX_RESIDUAL_PCT:g} % and {MAX_RESIDUAL_SPREADS:g} of its spreads is rejected)"
    )
    return "\n".join(lines)
