"""Requests that cannot fit the server's context, found before the run instead of during it.

The server says how long one request may be: ``max_model_len`` in the OpenAI listing (vLLM,
SGLang, the simulator), the per-slot context in llama.cpp's ``/props`` (``-c`` divided over
``-np`` slots: 8,192 over 8 leaves 1,024). A request whose prompt plus max_tokens exceeds it
is refused with a 400 that measures nothing, so ``fit_context`` counts them over the run's
specs (the first ``FIT_LIMIT``) and, by ``target.context_overflow``, refuses the run with the
numbers (``refuse``), trims them to fit (``trim``: max_tokens down first, then the prompt), or
lets them go (``send``, counted in the conditions). Counts are as exact as the prompts are: a
server /tokenize, a local tokenizer or token ids make them exact; otherwise approximate.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from loadgen.backends.identity import FIT_LIMIT, ServerIdentity
from loadgen.errors import RunError
from loadgen.records import RequestSpec
from loadgen.server.tokenize import FittedSpecs


class ContextOverflow(RunError):
    """Some of the run's requests cannot fit the server's context and the profile says refuse."""


def fit_context(
    ident: ServerIdentity, specs: Any, total: int | None, policy: str
) -> tuple[Any, dict[str, object]]:
    """The spec source to run (trimmed when asked) and the ``identity`` block, with
    ``requests_over_max_model_len`` (before any trim) and ``context_overflow`` when counted.
    ``policy`` is ``target.context_overflow``, whose values config/target.py defines."""
    limit = ident.max_model_len
    if limit is None or not total:
        return specs, ident.as_dict()
    n = min(total, FIT_LIMIT)
    over = [s for i in range(n) if _needs(s := specs.request(i)) > limit]
    block = dataclasses.replace(ident, requests_over_max_model_len=len(over)).as_dict()
    if not over:
        return specs, block
    block["context_overflow"] = policy
    if policy == "refuse":
        raise ContextOverflow(_refusal(ident, over, n, limit))
    if policy == "send":
        return specs, block
    fitted = dict(getattr(specs, "fitted", None) or {})
    for s in over:
        fitted[s.id] = trim(s, limit)
    block["requests_trimmed"] = len(over)
    return FittedSpecs(getattr(specs, "workload", specs), fitted), block


def _needs(spec: RequestSpec) -> int:
    """The context one request needs: its prompt and max_tokens; a pooling request's (embeddings,
    rerank) longest sequence, each input or query+document pair run on its own."""
    if spec.item_tokens:
        return max(spec.item_tokens)
    return spec.prompt_tokens + spec.output_tokens


def _refusal(ident: ServerIdentity, over: list[RequestSpec], n: int, limit: int) -> str:
    worst = max(over, key=_needs)
    where = f"the server's context of {limit} tokens"
    if ident.slots:
        where += f" per slot ({ident.engine or 'the server'} splits its context over {ident.slots} slots)"
    asks = (
        f"an item of {_needs(worst)} tokens"
        if worst.item_tokens
        else f"{_needs(worst)} (prompt {worst.prompt_tokens} + max_tokens {worst.output_tokens})"
    )
    return (
        f"{len(over)} of {n} requests need more than {where}: the longest asks {asks}, and "
        "the server would refuse them (HTTP 400). Shorten workload.input_tokens / "
        "workload.output_tokens (their max), give the server a longer context, or set "
        "target.context_overflow: trim (cut max_tokens, then the prompt, to fit) or send (send "
        "them anyway and count the failures)"
    )


def trim(spec: RequestSpec, limit: int) -> RequestSpec:
    """``spec`` cut to ``limit`` tokens: max_tokens down to what the prompt leaves (at least
    1), then the prompt down to what is left (its token ids cut, or its words in proportion,
    a tenth short; ``prompt_tokens`` is then the estimate). A pooling request's items too long
    are cut the same way, each on its own."""
    if spec.item_tokens and spec.inputs is not None:
        return _trim_items(spec, limit)
    output = max(1, min(spec.output_tokens, limit - spec.prompt_tokens))
    room = limit - output
    if spec.prompt_tokens <= room:
        return dataclasses.replace(spec, output_tokens=output)
    if isinstance(spec.prompt, list):
        return dataclasses.replace(spec, prompt=spec.prompt[:room], prompt_tokens=room, output_tokens=output)
    # Words are cut in proportion, a tenth short: a word is not always one token, and the
    # server's count of the cut text is not known here (token ids are cut exactly).
    words = spec.prompt.split(" ")
    keep = max(1, len(words) * room * 9 // (10 * max(1, spec.prompt_tokens)))
    text = " ".join(words[:keep])
    messages = spec.messages
    if messages:
        messages = [dict(m) for m in messages]
        messages[-1]["content"] = text
    tokens = room * 9 // 10
    return dataclasses.replace(
        spec, prompt=text, messages=messages, prompt_tokens=tokens, output_tokens=output
    )


def _trim_items(spec: RequestSpec, limit: int) -> RequestSpec:
    """A pooling request's items cut to fit ``limit`` each: the words of each one too long in
    proportion, a tenth short, its count then the estimate. A rerank pair's document is cut by
    the pair's proportion: the query stays whole (a query near the limit leaves no room)."""
    assert spec.inputs is not None and spec.item_tokens is not None
    inputs, counts = [], []
    for text, n in zip(spec.inputs, spec.item_tokens):
        if n > limit:
            words = text.split(" ")
            text = " ".join(words[: max(1, len(words) * limit * 9 // (10 * n))])
            n = limit * 9 // 10
        inputs.append(text)
        counts.append(n)
    return dataclasses.replace(
        spec, inputs=tuple(inputs), item_tokens=tuple(counts), prompt_tokens=sum(counts)
    )


__all__ = ["ContextOverflow", "fit_context", "trim"]
