"""Pooling protocols, answered whole (not streamed): embeddings and rerank, as vLLM serves them.

- ``embeddings``: ``POST /v1/embeddings`` ``{model, input: [str, ...], encoding_format}``, the
  OpenAI shape; the answer is ``{data: [{index, embedding}], usage: {prompt_tokens,
  total_tokens}}``, one embedding per input. ``encoding_format`` is ``base64`` (float32 bytes),
  as the OpenAI SDK sends by default, so what is measured is what production clients ask for;
  and reading a float answer whole (16 x 4096 floats is 1.3 MB of JSON, about 3 ms of parsing
  on this project's machine) would hold the event loop that stamps every other request.
  ``target.extra_body: {encoding_format: float}`` asks for float lists (read whole, at that
  cost: on the simulator the fidelity check shows it).
- ``rerank``: ``POST /v1/rerank`` ``{model, query, documents: [str, ...], top_n}``, the
  Jina/Cohere shape vLLM serves (also at ``/rerank``); the answer is ``{results: [{index,
  relevance_score}], usage: {total_tokens}}``, one result per document when ``top_n`` asks for
  them all (it does: ``top_n`` is the number of documents sent).

A request carries a batch (``RequestSpec.inputs``; ``items`` on its record). There is no token
stream, so no TTFT, ITL or TPOT: the record has its send, its first byte and its end, and the
run reports request latency (E2E) and items per second (``streamed = False``: the metric
registry's ``applies`` says which metrics describe such a run). What can go wrong is the
answer's shape, each an error class on the record, never a traceback: not JSON, no ``data`` /
``results``, the wrong count of embeddings or results, an item of the wrong type
(``malformed_stream``); a 200 whose body is ``{"error": ...}`` (``server_error_event``); an
error status (``http_<status>``, as for every protocol).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from loadgen import records as R
from loadgen.backends.base import BackendOptions
from loadgen.backends.openai import OpenAIBackend, usage_count
from loadgen.backends.registry import register
from loadgen.backends.stream import Live, SSEResponse, error_text, fail
from loadgen.backends.transports.base import Transport

# The largest answer read: 64 batched inputs of 4096 floats is about 5 MB of JSON.
ANSWER_LIMIT = 64 << 20


class JSONAnswer(SSEResponse):
    """One answer read whole: the body is kept as it arrives and parsed once at its end. A
    subclass checks the parsed answer in ``on_answer(obj, items)`` and raises ``TypeError`` /
    ``ValueError`` / ``KeyError`` for a shape that is wrong (the record is then
    ``malformed_stream`` with the reason)."""

    __slots__ = ("body", "last_ns")

    def __init__(self, rec: R.RequestRecord, keep_texts: bool = False) -> None:
        super().__init__(rec, False)
        self.body = bytearray()
        self.last_ns = 0  # the arrival of the answer's last bytes: its end (t_end_ns)

    def feed(self, t: int, raw: bytes) -> bool:
        if self.error_body is not None:
            return super().feed(t, raw)
        self.body += raw
        self.last_ns = t
        if len(self.body) > ANSWER_LIMIT:
            fail(self.rec, R.MALFORMED, f"the answer is larger than {ANSWER_LIMIT >> 20} MB", t)
            return False
        return True

    def finish(self, t_end: int) -> None:
        rec = self.rec
        if rec.error_class is not None:
            return
        # The answer ended when its last bytes arrived, stamped by the transport as they were
        # read, as a stream's chunks are (not when the transport's call returned, a turn later).
        rec.t_end_ns = self.last_ns or t_end
        if self.error_body is not None:
            fail(rec, R.http_error_class(rec.http_status or 0), error_text(self.error_body))
            return
        if rec.response_id is None:
            rec.response_id = self.rid
        try:
            obj = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            fail(rec, R.MALFORMED, f"the answer is not JSON: {bytes(self.body[:120])!r}")
            return
        if isinstance(obj, dict) and "error" in obj:
            fail(rec, R.SERVER_ERROR_EVENT, error_text(bytes(self.body)))
            return
        try:
            if not isinstance(obj, dict):
                raise TypeError(f"the answer is a {type(obj).__name__}, not an object")
            rid = obj.get("id")
            if isinstance(rid, str) and rid:
                rec.response_id = rid
            self.on_answer(obj, rec.items or 0)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            fail(
                rec, R.MALFORMED, f"an answer of an unexpected shape ({type(exc).__name__}: {str(exc)[:160]})"
            )
            return
        rec.ok = True

    def on_answer(self, obj: dict[str, Any], items: int) -> None:
        raise NotImplementedError

    def on_events(self, t: int, events: list[bytes]) -> bool:  # never called: no SSE here
        raise NotImplementedError

    def on_end(self) -> None:  # never called: ``finish`` reads the answer
        raise NotImplementedError


def _listed(obj: dict[str, Any], key: str, items: int, what: str) -> list[Any]:
    """``obj[key]``, a list of ``items`` entries; else why not."""
    if key not in obj:
        raise KeyError(f"no {key!r} in the answer")
    entries = obj[key]
    if not isinstance(entries, list):
        raise TypeError(f"{key} is a {type(entries).__name__}, not a list")
    if len(entries) != items:
        raise ValueError(f"{len(entries)} {what} for {items} sent")
    return entries


class _Embeddings(JSONAnswer):
    """``data``: one embedding per input, each a non-empty list of numbers or a base64 string
    of float32 bytes (``encoding_format: base64``; not decoded: its length is checked), all of
    one dimension."""

    __slots__ = ()

    def on_answer(self, obj: dict[str, Any], items: int) -> None:
        dims = set()
        for entry in _listed(obj, "data", items, "embeddings"):
            vec = entry["embedding"]
            if isinstance(vec, list):
                if not vec or not isinstance(vec[0], (int, float)) or isinstance(vec[0], bool):
                    raise TypeError(f"an embedding of {vec[:1]!r}..., not numbers")
                dims.add(len(vec))
            elif isinstance(vec, str) and vec:
                dims.add(_base64_floats(vec))
            else:
                raise TypeError(f"an embedding is {type(vec).__name__}, not a list of numbers")
        if len(dims) > 1:
            raise ValueError(f"embeddings of different dimensions {sorted(dims)}")
        usage = obj.get("usage") or {}
        n = usage_count(usage, "prompt_tokens")
        if n is not None:
            self.rec.prompt_tokens = n


def _base64_floats(text: str) -> int:
    """The count of float32 values a base64 embedding holds, from its length alone (decoding a
    megabyte an answer costs the event loop time every stamp waits for)."""
    padding = len(text) - len(text.rstrip("="))
    size = len(text) // 4 * 3 - padding
    if len(text) % 4 or padding > 2 or size % 4:
        raise ValueError(f"an embedding of {len(text)} base64 characters is not whole float32 values")
    return size // 4


class _Rerank(JSONAnswer):
    """``results``: one per document, each with its document's ``index`` and a numeric
    ``relevance_score``; ``usage`` counts every query+document pair's tokens (vLLM gives
    ``total_tokens``; ``prompt_tokens`` is read first where a server gives it)."""

    __slots__ = ()

    def on_answer(self, obj: dict[str, Any], items: int) -> None:
        seen = set()
        for r in _listed(obj, "results", items, "results"):
            i, score = r["index"], r["relevance_score"]
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < items:
                raise ValueError(f"a result's index {i!r} names no document of {items}")
            if not isinstance(score, (int, float)) or isinstance(score, bool):
                raise TypeError(f"relevance_score is {score!r}, not a number")
            seen.add(i)
        if len(seen) != items:
            raise ValueError(f"results name {len(seen)} distinct documents of {items}")
        usage = obj.get("usage") or {}
        n = usage_count(usage, "prompt_tokens")
        self.rec.prompt_tokens = n if n is not None else usage_count(usage, "total_tokens")


class _PoolingBackend(OpenAIBackend):
    """What embeddings and rerank share: chat's probe (``/v1/models``), no token stream, a
    batch per request, no local token counting (there is no output to count)."""

    __slots__ = ()
    streamed = False
    server_tokenize = False
    model_mix = False
    text_only = "a pooling endpoint takes text inputs"

    def __init__(
        self,
        opts: BackendOptions,
        transport: Transport,
        live: Live | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        super().__init__(opts, transport, live, None)  # nothing streams for a tokenizer to count

    async def send(self, spec: R.RequestSpec, rec: R.RequestRecord) -> None:
        if rec.items is None:
            rec.items = len(batch(spec))
        await super().send(spec, rec)


def batch(spec: R.RequestSpec) -> list[str]:
    """The request's items: the workload's batch, else its one prompt."""
    if spec.inputs is not None:
        return list(spec.inputs)
    return [spec.prompt if isinstance(spec.prompt, str) else " ".join(map(str, spec.prompt))]


@register
class EmbeddingsBackend(_PoolingBackend):
    __slots__ = ()
    name = "embeddings"
    description = "OpenAI-compatible /v1/embeddings (a batch of inputs a request; not streamed)"
    PATH = "/v1/embeddings"
    STREAM = _Embeddings

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": spec.model or self.opts.model,
            "input": batch(spec),
            "encoding_format": "base64",
        }
        if self.opts.extra_body:
            body.update(self.opts.extra_body)
        return body


@register
class RerankBackend(_PoolingBackend):
    __slots__ = ()
    name = "rerank"
    description = "Jina/Cohere-style /v1/rerank as vLLM serves it (a query and its documents; not streamed)"
    PATH = "/v1/rerank"
    STREAM = _Rerank
    query = True

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        docs = batch(spec)
        body: dict[str, Any] = {
            "model": spec.model or self.opts.model,
            "query": spec.prompt,
            "documents": docs,
            "top_n": len(docs),
        }
        if self.opts.extra_body:
            body.update(self.opts.extra_body)
        return body
