"""Gate rules on what the runs answered, not how fast: ``output_agreement``, ``quality.accuracy``
and ``quality.json_valid``.

``output_agreement`` is the fraction of the candidate's answers identical to the baseline's over
the prompts both runs sent identically (``loadgen.analysis.agreement``): did FP8 still say what
FP16 said? ``quality.accuracy`` is the candidate's own score against expected answers
(``summary.quality``), ``quality.json_valid`` the share of its structured answers valid against
their JSON schema. Both are bounded with ``min`` or ``max`` (a fraction, 0 to 1), no stat,
no stage, and are not resampled: agreement is already a comparison with the baseline, so a
ratio to it would mean nothing, and a run's answers at temperature 0 do not vary the way its
latencies do. A rule that cannot be judged is an error (exit 2), not a regression: a run that
kept no answers (``--keep-answers``), runs that sent no prompt alike, a candidate that scored no
answer.

Kept apart from ``gate.py`` (which dispatches here), so the gate's bootstrap machinery stays
one module and these rules need nothing from it; returns plain tuples for its ``RuleResult``.
Which such rules are well formed is the rules file's schema (``config.gate_rules``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.analysis.agreement import agreement
from loadgen.analysis.compare import answers_kept, run_answers
from loadgen.config.gate_rules import ACCURACY, JSON_VALID, OUTPUT_AGREEMENT
from loadgen.config.gate_rules import QUALITY_METRICS as METRICS
from loadgen.summary import Summary

__all__ = ["ACCURACY", "JSON_VALID", "KEEP", "METRICS", "OUTPUT_AGREEMENT", "Outcome", "check"]

KEEP = "--keep-answers (profile: output.answers.keep: true)"

# (status, baseline value, candidate value, interval, within noise, message): a RuleResult's fields
Outcome = tuple[str, float | None, float | None, None, bool, str]


def check(
    rule: Any, candidate: str | Path, baseline: str | Path, cand_s: Summary, base_s: Summary
) -> Outcome:
    """Judge one rule on the saved runs (their paths and summaries)."""
    op, limit = rule.limit()
    if rule.metric == ACCURACY:
        base, cand = _accuracy(base_s), _accuracy(cand_s)
        if cand is None:
            msg = (
                "the candidate has no quality.accuracy: none of its requests carried an expected "
                "answer (a task workload does: workload.tasks, as in profiles/quality.yaml)"
            )
            return "error", base, None, None, False, msg
        q = cand_s["quality"]
        what = f"quality.accuracy of the candidate {cand:.4g} ({q['correct']} of {q['scored']} right)"
    elif rule.metric == JSON_VALID:
        base, cand = _json_valid(base_s), _json_valid(cand_s)
        if cand is None:
            msg = (
                "the candidate has no quality.json_valid: none of its answers was validated (a "
                "structured-output workload does: workload.response_format, as in profiles/structured.yaml)"
            )
            return "error", base, None, None, False, msg
        q = cand_s["quality"]
        what = (
            f"quality.json_valid of the candidate {cand:.4g} "
            f"({q.get('json_valid_answers')} of {q.get('json_scored')} answers valid)"
        )
    else:
        base = None  # a pair's statistic: the baseline has no value of its own
        missing = [role for role, s in (("candidate", cand_s), ("baseline", base_s)) if not answers_kept(s)]
        if missing:
            msg = (
                f"output_agreement cannot be measured: the {' and the '.join(missing)} kept no "
                f"answers; run both with {KEEP}"
            )
            return "error", None, None, None, False, msg
        a = agreement(run_answers(baseline), run_answers(candidate))
        if a["agreement"] is None:
            msg = (
                f"output_agreement cannot be measured: no prompt was sent identically by both runs "
                f"({a['prompts_differ']} differed, {a['only_in_one']} in one run only)"
            )
            return "error", None, None, None, False, msg
        cand = a["agreement"]
        what = f"output agreement {cand:.4g} ({a['identical']} of {a['compared']} answers identical)"
    failed = cand > limit if op == "<=" else cand < limit
    msg = f"{what}, bound {op} {limit:.4g}; not resampled: " + (
        "beyond the bound" if failed else "within the bound"
    )
    return "fail" if failed else "pass", base, cand, None, False, msg


def _json_valid(summary: Summary) -> float | None:
    quality = summary.get("quality")
    value = quality.get("json_valid") if quality is not None else None
    return None if value is None else float(value)


def _accuracy(summary: Summary) -> float | None:
    quality = summary.get("quality")
    value = quality["accuracy"] if quality is not None else None
    return None if value is None else float(value)
