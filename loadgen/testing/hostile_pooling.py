"""The hostile server's answers on the pooling paths (``/v1/embeddings``, ``/v1/rerank``):
a well-formed answer of each shape, and one fault per answer shape a client of them must read.

    pooling_truncated     the answer's JSON cut in half (Content-Length says so: the HTTP is whole)
    pooling_wrong_count   one embedding (one rerank result) fewer than the inputs (documents) sent
    pooling_bad_item      the last item of the wrong make: a base64 embedding (what the client
                          asks for) two bytes short of whole float32 values, a float embedding
                          of strings, a rerank score that is a string

Embeddings are answered in the format asked (``encoding_format``: float32 bytes in base64, or
float lists).

``http_500`` answers these paths with its JSON error body and ``stall`` with the status line
and headers, then silence, as on every path; every other mode answers well-formed. Pure
functions, standard library only, as ``hostile_events.py``.
"""

from __future__ import annotations

from loadgen.testing.hostile_http import dumps

POOLING_MODES: tuple[str, ...] = ("pooling_truncated", "pooling_wrong_count", "pooling_bad_item")
# 0.5, 0.25, 0.125 as float32 little-endian bytes in base64; and the same two bytes short.
VECTOR_BASE64 = "AAAAPwAAgD4AAAA+"
SHORT_BASE64 = "AAAAPwAAgD4AAA=="
POOLING_PATHS = frozenset(("/v1/embeddings", "/v1/rerank"))


def pooling_answer(mode: str, path: str, body: dict, rid: str) -> bytes:
    """The JSON answer of a pooling request under ``mode``: one item per input (document),
    prompt tokens one a word, with the mode's fault."""
    rerank = path.endswith("rerank")
    items = body.get("documents") if rerank else body.get("input")
    items = [items] if isinstance(items, str) else list(items or [])
    query = str(body.get("query") or "")
    tokens = sum(len(str(t).split()) + len(query.split()) for t in items)
    n = len(items) - (mode == "pooling_wrong_count")
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    bad = mode == "pooling_bad_item"
    if rerank:
        results: list[dict] = [{"index": i, "relevance_score": 0.5} for i in range(n)]
        if bad:
            results[-1]["relevance_score"] = "0.5"
        obj = {"id": rid, "results": results, "usage": usage}
    else:
        b64 = body.get("encoding_format") == "base64"
        vec: object = VECTOR_BASE64 if b64 else [0.5, 0.25, 0.125]
        data = [{"index": i, "object": "embedding", "embedding": vec} for i in range(n)]
        if bad:
            data[-1]["embedding"] = SHORT_BASE64 if b64 else ["0.5", "0.25", "0.125"]
        obj = {"id": rid, "object": "list", "data": data, "usage": usage}
    out = dumps(obj)
    return out[: len(out) // 2] if mode == "pooling_truncated" else out
