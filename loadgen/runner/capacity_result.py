"""The capacity block (capacity.json and ``summary["capacity"]``) of a finished search: the rate
a confirming run held and the statement it stands for, and beside it the cliff the search
bracketed, labelled as what it is (where attainment crosses A), never as a sustainable rate.

``capacity_rps`` is the confirmed rate (null when none held). A confirmed rate is a decision,
not an estimate: one search gives it no interval, so ``ci95`` is [null, null] here (a repeated
search's is the t interval over its searches, ``capacity_repeats.py``), and the bootstrap
interval of the crossing is ``cliff.ci95``. Goodput, tokens/s and cost are the confirming run's,
over its measured window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, cast

from loadgen.analysis.cost import CostInputs, per_million
from loadgen.runner.capacity_confirm import Confirmation, statement
from loadgen.runner.capacity_search import Search, interval
from loadgen.summary import Capacity
from loadgen.summary.stages import CapacityCliff, CapacityProposal, CapacityTwin

CONFIRMED, UNCONFIRMED, NOT_FOUND, CLIENT_LIMITED, INTERRUPTED = (
    "confirmed",
    "unconfirmed",
    "not_found",
    "client_limited",
    "interrupted",
)
VERDICTS = (CONFIRMED, UNCONFIRMED, NOT_FOUND, CLIENT_LIMITED, INTERRUPTED)


class Proposed(Protocol):
    """What the block reads of the proposal (``capacity_stages.Proposal``)."""

    @property
    def rate(self) -> float | None: ...
    @property
    def by(self) -> Literal["twin", "search"]: ...
    @property
    def twin(self) -> CapacityTwin | None: ...


class Concluded(Protocol):
    """What the block reads of a finished plan (``capacity_stages.CapacityPlan``)."""

    search: Search
    slos: dict[str, float]
    measures: list[Any]
    confirm_stages: dict[int, Any]
    confirmations: list[Confirmation]

    @property
    def proposal(self) -> Proposed | None: ...

    unconfirmed: str | None
    client_ended: bool
    spent_s: float
    budget_s: float | None
    confirm_s: float
    costs: CostInputs | None
    seed: int
    method: str

    def passed(self, m: Any) -> bool: ...

    def confirmed(self) -> Confirmation | None: ...


def verdict(plan: Concluded, interrupted: bool) -> str:
    if interrupted:
        return INTERRUPTED
    if plan.confirmed() is not None:
        return CONFIRMED
    if plan.client_ended:
        return CLIENT_LIMITED
    return NOT_FOUND if plan.search.bracket()[0] is None else UNCONFIRMED


def capacity_block(plan: Concluded, interrupted: bool = False) -> Capacity:
    """The capacity block of a finished search and its confirmations (see the module's doc)."""
    s = plan.search
    lo, hi = s.bracket()
    ci_lo, ci_hi, crossing = interval(s.observed, s.target, seed=plan.seed)
    held = plan.confirmed()
    at = plan.confirm_stages.get(held.stage) if held is not None else None
    tokens = None if at is None else at.output_tokens_per_s
    costs = plan.costs
    usd = per_million(costs.gpu_hour_cost * costs.gpu_count, tokens) if costs is not None else None
    p = plan.proposal
    proposal = None
    if p is not None:
        off = None if held is None or p.rate is None else p.rate / held.rate - 1
        proposal = CapacityProposal(rate=p.rate, by=p.by, twin=p.twin, above_confirmed=off)
    judged = verdict(plan, interrupted)
    block = {
        "capacity_rps": None if held is None else held.rate,
        "verdict": judged,
        "statement": None if held is None else statement(held, s.target),
        "unconfirmed_because": None if held is not None else _why_not(plan, judged),
        "ci95": [None, None],
        "attainment": s.target,
        "attainment_at_capacity": None if held is None else held.attainment,
        "lower_bound_at_capacity": None if held is None else held.lower_bound,
        "slos": dict(plan.slos),
        "goodput_rps": None if at is None else at.goodput_rps,
        "output_tokens_per_s": tokens,
        "usd_per_million_output_tokens": usd,
        "gpu_hour_cost_usd": None if costs is None else costs.gpu_hour_cost,
        "gpu_count": None if costs is None else costs.gpu_count,
        "proposal": proposal,
        "confirmations": [c.as_dict() for c in plan.confirmations],
        "confirm_s": plan.confirm_s,
        "cliff": CapacityCliff(bracket=[lo, hi], crossing_rps=crossing, ci95=[ci_lo, ci_hi]),
        "capacity_level_rps": lo,
        "crossing_rps": crossing,
        "stages": _rows(plan),
        "stopped_because": s.stopped_because,
        "elapsed_s": round(plan.spent_s, 1),
        "budget_s": plan.budget_s,
        "method": plan.method,
    }
    return cast(Capacity, block)


def _why_not(plan: Concluded, judged: str) -> str:
    if judged == INTERRUPTED:
        return "interrupted before a confirming run held"
    return plan.unconfirmed or plan.search.stopped_because or "the search ended with nothing to confirm"


def _rows(plan: Concluded) -> list[dict[str, Any]]:
    """Every stage in the order run: the search's and the confirmations'."""
    held = {c.stage: c for c in plan.confirmations}
    rows = []
    ordered: Sequence[Any] = sorted(
        [*plan.measures, *(m for m in plan.confirm_stages.values() if m is not None)], key=lambda m: m.stage
    )
    for m in ordered:
        c = held.get(m.stage)
        rows.append(
            {
                "stage": m.stage,
                "kind": "confirm" if c is not None else "screen" if m.screening else "search",
                "rate": m.rate,
                "offered_rps": m.flags.size / m.window_s if m.window_s else None,
                "attainment": m.attainment,
                "passed": c.held if c is not None else plan.passed(m),
                "requests": int(m.flags.size),
                "throughput_rps": m.throughput_rps,
                "goodput_rps": m.goodput_rps,
                "ttft_p99_ms": m.ttft_p99_ms,
                "tpot_p99_ms": m.tpot_p99_ms,
                "error_rate": m.error_rate,
                "counted": m.client_lag_p99_ms is None,
                "saturation": m.saturation,
            }
        )
    return rows
