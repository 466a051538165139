"""Prompts fitted to the server's tokenizer: how a run's prompt lengths are made exact (token
ids, a local tokenizer, or the server's /tokenize), and which of them was used."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen.backends import registry
from loadgen.backends.identity import FIT_LIMIT
from loadgen.backends.transports.base import Transport
from loadgen.config import Profile
from loadgen.server.tokenize import FittedSpecs, ServerTokenizer, fit_prompts
from loadgen.workload import Workload

__all__ = ["FIT_BUDGET_S", "FIT_LIMIT", "fit_for_profile", "tokenize_endpoints"]

# Seconds of /tokenize fitting before a load whose request count nothing bounds.
FIT_BUDGET_S = 20.0


def tokenize_endpoints() -> tuple[str, ...]:
    """The endpoints whose prompts the server's /tokenize can fit (the protocols that say so)."""
    return registry.names(lambda backend: backend.server_tokenize)


async def fit_for_profile(
    profile: Profile,
    transport: Transport,
    model: str,
    workload: Workload,
    total: int | None,
    status: Callable[[str], None],
    plausible: int | None = None,
) -> tuple[Workload | FittedSpecs, dict[str, Any]]:
    """Exact prompt lengths from the server's /tokenize when it has one and nothing better is
    configured; otherwise the workload as it is, and how its lengths were made.

    ``total``: the requests the run will send, when known; ``plausible``: a bound on them (an
    open loop's rate over its duration). Without either (a duration-bounded closed loop sends as
    fast as the server answers), fitting goes on until ``FIT_LIMIT`` or ``FIT_BUDGET_S``: a slow
    /tokenize (a one-thread llama.cpp) must not hold the load back for minutes."""
    t = profile.target
    if not workload.fittable:
        return workload, {"method": "as given (a dataset, trace, task set, shared prefix or session)"}
    if t.prompt_format == "token_ids":
        return workload, {"method": "token ids (exact)"}
    if workload.tokenizer is not None:
        if workload.through_template:
            return workload, {"method": "local tokenizer, through the model's chat template (exact)"}
        return workload, {"method": "local tokenizer (exact)"}
    approx = {"method": "approximate (one common word ~ one token)"}
    backend = registry.backend(t.endpoint)
    if profile.workload.prompt.server_tokenize == "never" or not backend.server_tokenize:
        return workload, approx
    tokenizer = ServerTokenizer(transport, model, chat=backend.messages)
    if not await tokenizer.available():
        return workload, {**approx, "server_tokenize": "not offered by the server"}
    bound = total if total is not None else plausible
    n = min(bound if bound is not None else FIT_LIMIT, FIT_LIMIT)
    budget_s = None if bound is not None else FIT_BUDGET_S
    status(f"fitting up to {n} prompts to exact lengths with the server's /tokenize")
    specs, info = await fit_prompts(tokenizer, workload, n, budget_s)
    if total is None:
        info["note"] = f"requests past {info['requests_fitted']} keep approximate lengths"
    return specs, info
