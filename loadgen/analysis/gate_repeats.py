"""The gate's rules on repeated runs (``--repeats N``): the repeats' spread, not the requests'.

The per-request bootstrap resamples one run's requests: it knows how much a run's figure would
move if the same run had drawn other requests, not how much it moves from one run to the next
(a server that formed its batches differently, a noisy neighbour). Two single runs that differ
by run-to-run noise can therefore fail a gate whose bootstrap intervals are narrow. Where the
candidate has repeats, each repeat's statistic is computed from its own records (the same
``bootstrap.statistic`` the bootstrap uses, so a rule means the same thing), and the rule is
judged on the repeats:

- relative rule, both runs repeated: the ratio of the repeat means with Welch's t interval
  (``analysis.repeats.welch_ratio``: delta method, Welch-Satterthwaite degrees of freedom);
- relative rule, the baseline one run: the candidate's repeats against the baseline's value,
  taken as exact (its own run-to-run spread is unknown);
- absolute rule: Student's t interval of the candidate's repeat mean.

A rule fails only when the whole interval is beyond its bound, as with the bootstrap; with few
repeats t is wide (4.30 at 3 repeats), so one noisy repeat widens the interval rather than
flipping the verdict, while a shift every repeat shows fails. A candidate without repeats keeps
the per-request bootstrap (``None`` here), even against a repeated baseline.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.analysis import bootstrap as bs
from loadgen.analysis import repeats as rp
from loadgen.analysis.bootstrap import Interval
from loadgen.analysis.runs import load_summary, load_table
from loadgen.config.gate_rules import GateRule

MIN_REPEATS = 2  # a spread needs two values


def repeat_dirs(path: str | Path, summary: Mapping[str, Any]) -> list[Path] | None:
    """The folders of a run's complete repeats, or None when it has fewer than ``MIN_REPEATS``."""
    block = summary.get("repeats")
    if not isinstance(block, Mapping):
        return None
    root = Path(path)
    root = root.parent if root.is_file() else root
    dirs = [root / r["path"] for r in block.get("runs") or [] if r.get("complete", True)]
    return dirs if len(dirs) >= MIN_REPEATS else None


def repeat_values(dirs: list[Path], metric: str, stat: str | None, wanted: Collection[str]) -> list[float]:
    """``metric`` (``stat``) of each repeat, from its own records and summary (NaNs dropped)."""
    out = []
    for d in dirs:
        table = load_table(d)
        if not bs.needs_gaps(wanted):
            table = table.without_chunks()
        v = bs.statistic(bs.RunSamples.from_run(table, load_summary(d), wanted), metric, stat)
        if not np.isnan(v):
            out.append(float(v))
    return out


def check(
    rule: GateRule, cand: list[float], base: list[float] | float | None, confidence: float
) -> tuple[str, float | None, float | None, Interval | None, bool, str]:
    """A rule on the candidate's repeat values (``cand``) and the baseline's (``base``: its
    repeat values, or its one value): (status, baseline, candidate, interval, within_noise,
    message), the baseline and candidate as the means of their repeats."""
    c_mean = float(np.mean(cand)) if cand else None
    b_mean = None if base is None else float(np.mean(base)) if isinstance(base, list) else float(base)
    if len(cand) < MIN_REPEATS:
        msg = f"the candidate has {len(cand)} repeat(s) with {rule.metric} data: too few for a spread"
        return "fail", b_mean, c_mean, None, False, msg
    if rule.relative:
        if base is None or b_mean is None or b_mean <= 0:
            msg = f"the baseline has no positive {rule.metric} value: cannot compare against it"
            return "error", b_mean, c_mean, None, False, msg
        r = rp.welch_ratio(cand, base, confidence)
        assert r is not None  # two candidate values and a positive baseline mean
        low, high, estimate = r.low, r.high, r.estimate
        how = (
            f"Welch t over the repeats ({len(cand)} candidate, {len(base)} baseline; df {r.df:.1f})"
            if isinstance(base, list)
            else f"Student t over the candidate's {len(cand)} repeats; the baseline (one run) taken as exact"
        )
        what = "ratio of repeat means candidate/baseline"
    else:
        iv = rp.t_interval(cand, confidence)
        assert iv.mean is not None and iv.low is not None and iv.high is not None
        estimate, low, high = iv.mean, iv.low, iv.high
        how = f"Student t over the candidate's {len(cand)} repeats (df {len(cand) - 1})"
        what = "candidate's repeat mean"
    op, limit = rule.limit()
    failed, beyond = (low > limit, estimate > limit) if op == "<=" else (high < limit, estimate < limit)
    noise = beyond and not failed
    msg = (
        f"{what} {estimate:.4g}, {confidence:.0%} CI [{low:.4g}, {high:.4g}] by {how}, "
        f"bound {op} {limit:.4g}: "
    )
    msg += (
        "the whole interval is beyond the bound"
        if failed
        else "beyond the bound but within the repeats' noise (the interval reaches inside it)"
        if noise
        else "within the bound"
    )
    iv_out = Interval(estimate, low, high, 0)
    return ("fail" if failed else "pass"), b_mean, c_mean, iv_out, noise, msg
