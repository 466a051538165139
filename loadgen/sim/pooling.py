"""The simulator's pooling endpoints: ``/v1/embeddings`` and ``/v1/rerank`` (also ``/rerank``),
as vLLM serves them for an embedding or a cross-encoder model.

A pooling request is one prefill and nothing after it: the engine gets one sequence whose
prompt is every token the request carries (an embeddings request's inputs together; a rerank
request's query+document pairs, each pair scored as one sequence, as a cross-encoder does) and
one output token, the step that completes its prompt. It is batched with everything else in
that step (compute-bound, as every prefill is), and answered whole when the prefill ends: the
vectors (``embedding_dim`` floats each, unit length, picked by a hash of the input from a
pool drawn once; float lists, or float32 bytes in base64 for ``encoding_format: base64``) or the
scores (a hash of query and document, in [0, 1)). Its attention is costed as one sequence of
all the tokens, a little more than the separate sequences a server runs: a simplification the
docs state. The ground truth logs it like any other request (``output_tokens`` 0).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import struct
from typing import Any

import numpy as np

from .config import SimConfig
from .requests import BadRequest, RequestState
from .text import EMPTY_PROMPT_TOKENS, WordStream, text_tokens

ENDPOINTS = ("embeddings", "rerank")


def _texts(body: dict[str, Any], key: str) -> list[str]:
    value = body.get(key)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"{key} must be a string or a non-empty list of strings", param=key)
    return value


def _count(text: str) -> int:
    return len(text_tokens(text)) or len(EMPTY_PROMPT_TOKENS)


def parse_pooling(body: Any, endpoint: str, config: SimConfig, rid: str, created: int) -> RequestState:
    """A pooling request as the engine's one-step sequence; its items in ``state.items``."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = config.served_model_name
    asked = body.get("model")
    if asked not in (None, model):
        raise BadRequest(f"The model `{asked}` does not exist.", 404, "NotFoundError", "model")
    encoding = body.get("encoding_format", "float") if endpoint == "embeddings" else "float"
    if encoding not in ("float", "base64"):
        raise BadRequest(
            f"encoding_format must be 'float' or 'base64', not {encoding!r}", param="encoding_format"
        )
    if endpoint == "embeddings":
        items = _texts(body, "input")
        lengths = [_count(t) for t in items]
        keys = [t.encode() for t in items]
    else:
        query = body.get("query")
        if not isinstance(query, str):
            raise BadRequest("query must be a string", param="query")
        items = _texts(body, "documents")
        lengths = [_count(query) + _count(d) for d in items]
        keys = [query.encode() + b"\x00" + d.encode() for d in items]
    if max(lengths) > config.context_len:
        raise BadRequest(
            f"This model's maximum context length is {config.context_len} tokens; an input of "
            f"{max(lengths)} tokens is longer",
            param="input" if endpoint == "embeddings" else "documents",
        )
    prompt_tokens = sum(lengths)
    state = RequestState(
        rid, False, False, False, False, created, model, prompt_tokens, 1, 1, WordStream(0, b"")
    )
    state.endpoint = endpoint
    state.items = keys
    state.base64 = encoding == "base64"
    return state


def answer(state: RequestState, config: SimConfig) -> dict[str, Any]:
    """The whole answer of a pooling request, vLLM's shape."""
    keys = state.items or []
    usage = {
        "prompt_tokens": state.prompt_tokens,
        "total_tokens": state.prompt_tokens,
        "completion_tokens": 0,
    }
    if state.endpoint == "embeddings":
        encode = vector_base64 if state.base64 else vector
        data = [
            {"index": i, "object": "embedding", "embedding": encode(k, config.embedding_dim, config.seed)}
            for i, k in enumerate(keys)
        ]
        return {
            "id": state.rid,
            "object": "list",
            "created": state.created,
            "model": state.model,
            "data": data,
            "usage": usage,
        }
    results = sorted(
        ({"index": i, "relevance_score": score(k, config.seed)} for i, k in enumerate(keys)),
        key=lambda r: -r["relevance_score"],
    )
    return {"id": state.rid, "model": state.model, "results": results, "usage": usage}


def _seed(key: bytes, seed: int) -> int:
    salt = struct.pack("<Q", seed & (2**64 - 1))
    return int.from_bytes(hashlib.blake2b(key, digest_size=8, salt=salt).digest(), "little")


# Vectors come from a pool drawn once per (dimension, seed): an answer of 16 x 4096 floats is
# then a lookup per input, not 16 draws on the event loop that paces every stream.
POOL_VECTORS = 251


@functools.lru_cache(maxsize=8)
def _pool(dim: int, seed: int) -> tuple[list[float], ...]:
    rng = np.random.default_rng([seed, dim])
    m = rng.standard_normal((POOL_VECTORS, dim))
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return tuple(np.round(m, 6).tolist())


def vector(key: bytes, dim: int, seed: int = 0) -> list[float]:
    """A unit vector of ``dim`` floats to 6 decimals, the same for the same input and seed: the
    input's hash picks one of ``POOL_VECTORS`` (two inputs share one 1 time in 251)."""
    return _pool(dim, seed)[_seed(key, seed) % POOL_VECTORS]


@functools.lru_cache(maxsize=8)
def _pool_base64(dim: int, seed: int) -> tuple[str, ...]:
    m = np.asarray(_pool(dim, seed), dtype="<f4")
    return tuple(base64.b64encode(row.tobytes()).decode() for row in m)


def vector_base64(key: bytes, dim: int, seed: int = 0) -> str:
    """``vector``'s floats as vLLM answers ``encoding_format: base64``: float32 little-endian
    bytes in base64."""
    return _pool_base64(dim, seed)[_seed(key, seed) % POOL_VECTORS]


def score(key: bytes, seed: int = 0) -> float:
    """A relevance score in [0, 1), the same for the same query and document."""
    return round(_seed(key, seed) / 2**64, 6)
