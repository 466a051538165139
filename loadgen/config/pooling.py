"""What a profile may ask of a pooling protocol (embeddings, rerank: answered whole, a batch of
items a request) and of a streamed one, checked once on the way in.

Why a check of its own: which metrics a run has follows from its protocol (the backend's
``streamed``, the registry's ``applies``), so an SLO, a rule or a precision target naming a
metric the run will not have would be evaluated against nothing: goodput would count every
request good against a TTFT that does not exist. Each is an error naming the field and the fix.
A pooling run also takes its inputs from synthetic prompts only, for now: a dataset's, a
trace's or a session's prompts are single prompts, not batches.
"""

from __future__ import annotations

from typing import Any

from loadgen import metric_defs
from loadgen.backends import registry
from loadgen.config.base import field_msg
from loadgen.config.lengths import EmpiricalLength, FixedLength, UniformLength
from loadgen.config.until import parse_until

# The most items one request may carry: far beyond a served model's max batch (vLLM's
# embeddings take a few hundred inputs), small enough that a batch's prompts stay in memory.
MAX_BATCH = 4096
# A pooling run's traffic: synthetic prompts only (workload.<key> is rejected).
_SINGLE_PROMPT_SOURCES = ("dataset", "trace", "tasks", "prefix", "sessions", "models")


def batch_upper_bound(dist: Any) -> int | None:
    """The largest batch ``workload.batch_size`` can draw; None when it has no bound."""
    if isinstance(dist, FixedLength):
        return dist.value
    if isinstance(dist, UniformLength):
        return dist.max
    if isinstance(dist, EmpiricalLength):
        return max(dist.data)
    return getattr(dist, "max", None)


def check(profile: Any) -> None:
    """Raise (a ``field_msg``) for the first setting the profile's protocol cannot honour."""
    endpoint = profile.target.endpoint
    streamed = registry.backend(endpoint).streamed
    work, sla = profile.workload, profile.sla
    pooling = ", ".join(registry.names(lambda b: not b.streamed))
    if streamed and work.batch_size is not None:
        raise field_msg(
            "workload.batch_size",
            f"sets the items of a pooling request ({pooling}); endpoint {endpoint} sends one "
            "prompt a request: remove it, or set target.endpoint to one of those",
        )
    fix = "bound the request latency with sla.e2e_ms" if not streamed else f"use endpoint {pooling}"
    for name in metric_defs.SLOS:
        d = metric_defs.get(name)
        if getattr(sla, name) is not None and not d.applies_to(streamed):
            raise field_msg(f"sla.{name}", _missing(endpoint, streamed, d, fix))
    for i, rule in enumerate(sla.rules):
        d = metric_defs.get(rule.metric)
        if not d.applies_to(streamed):
            raise field_msg(f"sla.rules[{i}]", _missing(endpoint, streamed, d, f"remove '{rule.text()}'"))
    if profile.load.until:
        d = metric_defs.get(parse_until(profile.load.until).metric)
        if not d.applies_to(streamed):
            raise field_msg("load.until", _missing(endpoint, streamed, d, "name e2e_ms"))
    if streamed:
        return
    for key in _SINGLE_PROMPT_SOURCES:
        if getattr(work, key) is not None:
            raise field_msg(
                f"workload.{key}",
                f"shapes single prompts; endpoint {endpoint} sends batches of synthetic inputs "
                "(workload.batch_size, workload.input_tokens): remove it",
            )
    if work.prompt.system_prompt_tokens:
        raise field_msg(
            "workload.prompt.system_prompt_tokens", f"is a chat setting; endpoint {endpoint} has none"
        )
    if profile.load.stages or profile.load.sweep is not None:
        raise field_msg(
            "load", f"a staged run of endpoint {endpoint} is not supported yet: run each level alone"
        )
    top = batch_upper_bound(work.batch_size)
    if work.batch_size is not None and (top is None or top > MAX_BATCH):
        raise field_msg(
            "workload.batch_size",
            (f"can draw {top} items" if top is not None else "has no upper bound")
            + f"; set its max to at most {MAX_BATCH} (items a request)",
        )


def _missing(endpoint: str, streamed: bool, d: metric_defs.MetricDef, fix: str) -> str:
    if streamed:
        return f"names {d.name}, which only a pooling run has; endpoint {endpoint} streams tokens: {fix}"
    return (
        f"names {d.name} ({d.label}), but endpoint {endpoint} answers whole, with no token stream, "
        f"so its runs have no {d.label}: {fix}"
    )
