"""A gate rule on a metric the bootstrap does not resample (``MetricDef.resampled`` false): the
GPU's energy per token, tokens per joule, mean power.

Why not resampled: the energy is one counter difference over the whole measured window, shared
by every request in flight at once; drawing requests again does not draw the GPU's joules again,
so a resampled interval would describe nothing. The rule compares the two summaries' values (a
stage's, for a stage rule) and says so (``method`` "none"); a relative bound is the ratio of the
two. A run without the telemetry block cannot be judged: an error for the baseline, a failure
for the candidate, each naming what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen import metric_defs
from loadgen.analysis import gate_stages as gs
from loadgen.analysis.gate_result import RuleResult
from loadgen.config.gate_rules import GateRule

Stages = tuple[tuple[int, str], tuple[int, str]] | None


def check(rule: GateRule, cand_s: Mapping[str, Any], base_s: Mapping[str, Any], st: Stages) -> RuleResult:
    """The rule against the summaries' values of its metric (of the stage ``st`` resolves)."""
    where = ""
    if st is not None:
        cand_s, base_s = gs.stage_summary(cand_s, st[0][0]), gs.stage_summary(base_s, st[1][0])
        where = f" in stage {st[0][0]} ({st[0][1]})"
    d = metric_defs.get(rule.metric)
    path = ".".join(d.path)
    cand, base = metric_defs.lookup(cand_s, d.name), metric_defs.lookup(base_s, d.name)
    stage = None if st is None else st[0]
    if rule.relative and base is None:
        msg = f"the baseline has no {path}{where} (no GPU telemetry was read): cannot compare against it"
        return RuleResult(rule, "error", base, cand, None, False, msg, stage=stage, method="none")
    if cand is None:
        msg = f"the candidate has no {path}{where} (no GPU telemetry was read)"
        return RuleResult(rule, "fail", base, cand, None, False, msg, stage=stage, method="none")
    op, limit = rule.limit()
    value = cand / base if rule.relative and base else cand
    if rule.relative and not base:
        msg = f"the baseline's {path}{where} is 0: no ratio to it"
        return RuleResult(rule, "error", base, cand, None, False, msg, stage=stage, method="none")
    failed = value > limit if op == "<=" else value < limit
    what = "ratio candidate/baseline" if rule.relative else "candidate"
    msg = (
        f"{what} {value:.4g} (summary.{path}{where}), bound {op} {limit:.4g}; not resampled (one "
        "energy counter difference per run): " + ("beyond the bound" if failed else "within the bound")
    )
    return RuleResult(
        rule, "fail" if failed else "pass", base, cand, None, False, msg, stage=stage, method="none"
    )
