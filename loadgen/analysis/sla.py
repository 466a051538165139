"""Per-request SLOs (goodput) and run-level SLA rules, evaluated on a summary's numbers.

The SLA is read through two protocols the profile's ``SlaConfig`` and ``SlaRule`` meet
(``Sla``, ``Rule``): ``sla.<slo>`` for each of the registry's ``SLOS`` (``ttft_ms``,
``tpot_ms``, ``e2e_ms``: per-request SLOs in ms, ``None`` = unset), ``sla.rules`` (each with
``metric``, ``stat``, ``op``, ``threshold``) and ``sla.max_error_rate``. Protocols, not the
models: the evaluator's own defences (an unknown metric or stat fails its rule, naming why) are
tested with rules the profile would refuse.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import numpy as np

from loadgen import metric_defs
from loadgen.config.sla import stat_key
from loadgen.summary import SlaBlock

# Per-request SLOs that define goodput (DistServe / vLLM ``--goodput``), as frame columns.
SLO_FIELDS: tuple[str, ...] = metric_defs.SLOS
# A rule may name any metric of the registry: a distribution with one of
# ``metric_defs.RULE_STATS``, a run scalar (read at its ``path`` in the summary) without a stat.


class Rule(Protocol):
    @property
    def metric(self) -> str: ...
    @property
    def stat(self) -> str | None: ...
    @property
    def op(self) -> str: ...
    @property
    def threshold(self) -> float: ...


class Sla(Protocol):
    """The SLA (``SlaConfig``); each registry SLO is read by name (``getattr``)."""

    @property
    def rules(self) -> Sequence[Rule]: ...
    @property
    def max_error_rate(self) -> float: ...


OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def set_slos(sla: Sla | None) -> dict[str, float]:
    """The per-request SLOs that are set, e.g. ``{"ttft_ms": 700.0}``; ``{}`` when none are."""
    if sla is None:
        return {}
    out = {}
    for name in SLO_FIELDS:
        value = getattr(sla, name, None)
        if value is not None:
            out[name] = float(value)
    return out


def good_mask(ok: np.ndarray, columns: dict[str, np.ndarray], slos: dict[str, float]) -> np.ndarray:
    """Which requests are "good": ok and within every SLO that is set.

    ``columns`` maps each SLO name to the per-request value in ms (NaN where undefined).
    A request with no per-token latency (TPOT: fewer than 2 output tokens) passes that SLO: it
    had no later token to be slow on; a request with no TTFT or E2E (no content arrived) fails
    those SLOs, since it cannot have met them.
    """
    good = ok.astype(bool).copy()
    for name, limit in slos.items():
        values = columns[name]
        within = values <= limit
        formula = metric_defs.get(name).formula
        if formula is not None and formula.per_token:
            within |= np.isnan(values)
        good &= within
    return good


def rule_text(rule: Rule) -> str:
    text = getattr(rule, "text", None)
    if callable(text):
        return str(text())
    stat = getattr(rule, "stat", None)
    name = f"{stat} {rule.metric}" if stat else rule.metric
    return f"{name} {rule.op} {rule.threshold}"


def evaluate(sla: Sla | None, summary: Mapping[str, Any], *, incomplete: bool = False) -> SlaBlock:
    """The ``sla`` block: each rule checked against ``summary`` ({counts, metrics, ...}), after
    the error-rate check that is part of every verdict (``sla.max_error_rate``): its detail comes
    first, and when it fails its reason says how many requests failed and why. ``incomplete``:
    the run (or stage) was stopped before its limits, so a verdict it has is ``incomplete``
    (its rules' values stay in the details), never ``pass``: its percentiles describe a shorter
    run than asked.

    A rule whose metric has no data (an empty distribution, a rate over a zero-length
    window) fails, with value ``None`` and a ``reason``; so does an unknown metric or stat.
    """
    rules = list(sla.rules) if sla is not None else []
    slos = set_slos(sla)
    details = [_check(rule, summary) for rule in rules]
    if sla is not None and (details or slos):
        details.insert(0, _errors(sla.max_error_rate, summary))
    counts = summary.get("counts") or {}
    all_warmup = not counts.get("sent") and bool(counts.get("warmup"))
    if not details:
        verdict = "none"
    elif all_warmup:
        verdict = "none"  # nothing was measured: no rule can pass or fail
    elif incomplete:
        verdict = "incomplete"
    else:
        verdict = "pass" if all(d["passed"] for d in details) else "fail"
    block: dict[str, Any] = {
        "rules": [d["rule"] for d in details],
        "verdict": verdict,
        "details": details,
        "slos": slos,
    }
    if details and all_warmup:
        block["no_verdict"] = "no measured request: every request sent was warm-up"
    if not slos:
        block["slo_note"] = "no per-request SLO set: goodput equals request throughput"
    return cast(SlaBlock, block)


def failures_text(counts: Mapping[str, Any]) -> str | None:
    """'48 of 80 requests failed (read 40, http_400 8)', or None when none failed."""
    failed = int(counts.get("failed") or 0)
    if not failed:
        return None
    done = failed + int(counts.get("ok") or 0)
    why = ", ".join(f"{k} {v}" for k, v in (counts.get("errors_by_class") or {}).items())
    return f"{failed} of {done} requests failed" + (f" ({why})" if why else "")


def server_reasons(counts: Mapping[str, Any]) -> str:
    """Each failed class's first message and fix, as the gate and compare show them:
    'http_422 "Unexpected fields in the request: {'ignore_eos'}" (fix: ...)'; "" without any."""
    parts = []
    for cls, sample in (counts.get("error_samples") or {}).items():
        if not sample.get("message"):
            continue
        fix = f" (fix: {sample['hint']})" if sample.get("hint") else ""
        parts.append(f'{cls} "{sample["message"]}"{fix}')
    return "; ".join(parts)


def failures_said(counts: Mapping[str, Any]) -> str | None:
    """``failures_text`` with the server's words after it: '6 of 6 requests failed (http_422 6);
    the server said http_422 "..." (fix: ...)', or None when none failed."""
    failed = failures_text(counts)
    if failed is None:
        return None
    said = server_reasons(counts)
    return failed + (f"; the server said {said}" if said else "")


def nothing_served(summary: Mapping[str, Any]) -> str | None:
    """Why a run served nothing (no measured request ok), in the one line its command ends with,
    or None when something was served. A run like that never exits 0: its figures are of
    refusals, and a CI job reading only the exit code would otherwise pass it."""
    counts = summary.get("counts") or {}
    if counts.get("ok"):
        return None
    return f"nothing was served: {failures_said(counts) or 'no measured request finished'}"


def run_failures(**summaries: Mapping[str, Any]) -> tuple[str, ...]:
    """'candidate: 48 of 80 requests failed (...): the server said http_400 "..."' for each
    named summary with failures."""
    out = ((name, failures_said(s.get("counts") or {})) for name, s in summaries.items())
    return tuple(f"{name}: {text}" for name, text in out if text)


def _errors(limit: float, summary: Mapping[str, Any]) -> dict:
    counts = summary.get("counts") or {}
    rate = counts.get("error_rate")
    passed = rate is not None and rate <= limit
    reason = None
    if rate is None:
        reason = "no request finished: nothing to judge"
    elif not passed:
        reason = f"{failures_text(counts)}: error rate {rate:.1%} > max_error_rate {limit:.1%}"
    return {
        "rule": f"error_rate <= {limit:g}",
        "metric": "error_rate",
        "stat": None,
        "op": "<=",
        "threshold": limit,
        "value": rate,
        "passed": passed,
        "reason": reason,
        "max_error_rate": True,
    }


def _check(rule: Rule, summary: Mapping[str, Any]) -> dict:
    metric = str(rule.metric)
    stat = getattr(rule, "stat", None)
    stat = None if stat is None else stat_key(str(stat))
    op = str(rule.op)
    threshold = float(rule.threshold)
    value, reason = _lookup(summary, metric, stat)
    if reason is None and op not in OPS:
        reason = f"unknown operator {op!r}"
    # _lookup gives a value exactly when it gives no reason.
    passed = reason is None and value is not None and bool(OPS[op](value, threshold))
    return {
        "rule": rule_text(rule),
        "metric": metric,
        "stat": stat,
        "op": op,
        "threshold": threshold,
        "value": value,
        "passed": passed,
        "reason": reason,
    }


def _lookup(summary: Mapping[str, Any], metric: str, stat: str | None) -> tuple[float | None, str | None]:
    d = metric_defs.BY_NAME.get(metric)
    if d is None:
        return None, f"unknown metric {metric!r}"
    if d.kind == "run":
        if stat is not None:
            return None, f"{metric} is a run-level number and takes no stat"
        if d.when_present:  # GPU energy: a block only runs that read their GPUs have
            where = ".".join(d.path[:-1])
            return _present(metric_defs.lookup(summary, metric), f"no data: {metric} (no {where} block)")
        return _present(
            metric_defs.lookup(summary, metric),
            f"{metric} is undefined for this run (no requests or empty window)",
        )
    if stat is None:
        return None, f"{metric} needs a stat (p50, p99, mean, ...)"
    if stat not in metric_defs.RULE_STATS:
        return None, f"unknown stat {stat!r} for {metric}"
    dist = metric_defs.lookup(summary, metric) or {}
    if not dist.get("count"):
        return None, f"no data: {metric} has no samples"
    return _present(dist.get(stat), f"no data: {metric} {stat} is undefined")


def _present(value: Any, reason: str) -> tuple[float | None, str | None]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None, reason
    return float(value), None
