"""Value types of the CLI's flags: a duration (``30s``, ``2m``) and a list of per-request SLOs
(``--sla 'ttft_ms<700, tpot_ms<50'``). argparse calls them; a bad value is its clean error."""

from __future__ import annotations

import argparse
import re

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """Seconds from '30', '30s', '500ms', '2m' or '1h' (argparse names the flag in its error)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 500ms, 2m)")
    return float(m[1]) * _UNITS[m[2] or "s"]


def repeats(text: str) -> int:
    """A count of repeats: a whole number >= 1 ('3'); argparse names the flag in its error."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; e.g. --repeats 3") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} repeats: at least 1 (1 is one plain run)")
    return n


def parse_sla(text: str) -> dict[str, float]:
    """``--sla "p99 ttft_ms<700, p99 tpot_ms<50"`` -> ``{"ttft_ms": 700.0, "tpot_ms": 50.0}``.

    Each item is a per-request SLO, a bound every request must meet (``ttft_ms<700`` sets
    sla.ttft_ms = 700). A leading stat (``p99``) is accepted and dropped: how many requests must
    meet the bound is the attainment target, not part of the SLO."""
    from loadgen import metric_defs
    from loadgen.analysis.sla import SLO_FIELDS
    from loadgen.config.sla import ParsedRule, parse_rule

    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in re.split(r"[,;]", text))):
        try:
            rule: ParsedRule | None = parse_rule(part.lower())  # the one rule grammar
        except ValueError:
            rule = None
        if rule is None or rule.op not in ("<", "<=") or rule.metric not in SLO_FIELDS:
            raise argparse.ArgumentTypeError(
                f"{part!r}: expected '[stat] metric < bound' with metric one of {', '.join(SLO_FIELDS)}, "
                "e.g. 'ttft_ms<700' or 'p99 tpot_ms<50'"
            )
        stat, bound = rule.stat, rule.threshold
        if stat is not None and stat not in metric_defs.RULE_STATS:
            valid = ", ".join(metric_defs.RULE_STATS)
            raise argparse.ArgumentTypeError(f"{part!r}: unknown stat; valid: {valid}")
        if not bound > 0 or rule.metric in out:
            raise argparse.ArgumentTypeError(f"{part!r}: each metric once, with a bound > 0")
        out[rule.metric] = bound
    if not out:
        raise argparse.ArgumentTypeError("no SLO given; e.g. --sla 'ttft_ms<700, tpot_ms<50'")
    return out
