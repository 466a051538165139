"""The simulator's encoders for two engines' native streams: Triton's generate extension and
SGLang's ``/generate`` (shares no code with the client, as ``sse.py`` for chat).

Both follow ``ChunkEncoder``'s interface, so the engine loop paces every protocol alike:
``start()`` when the request is accepted, ``token(word_json, k, finish)`` per token (one event
per decoding step, as both engines stream at ``stream_interval`` 1), ``end(k, include_usage,
finish_reason)`` after the last one; and ``answer(text, k, finish_reason)``, the one JSON
object a non-streamed request gets (its text and token ids).

- Triton (TensorRT-LLM ``ensemble`` shape): ``data: {"model_name", "model_version",
  "text_output", ...}`` with only the step's new text, no terminator: the response just ends.
  With ``return_num_output_tokens`` every event also says ``num_output_tokens`` (1, as Triton's
  vLLM backend counts a step's tokens), with ``return_num_input_tokens`` the prompt's.
- SGLang: ``data: {"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
  "completion_tokens", "cached_tokens"}}`` then ``data: [DONE]``. ``text`` and ``output_ids``
  are the whole output so far (SGLang's default), or only the step's new part with
  ``incremental`` (SGLang's ``--incremental-streaming-output``). A token's id is its word's
  index in the vocabulary; the pseudo-EOS that ends an answer early is id ``VOCAB_SIZE``.

Requests are read as completions requests (``as_completion``): the prompt is counted and
seeded exactly as the same text (or token ids) sent to ``/v1/completions``, so the words that
come back are the same too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .text import VOCAB_SIZE, WORDS_JSON

DONE = b"data: [DONE]\n\n"
SGLANG_DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
EOS_ID = VOCAB_SIZE  # no word has this id
# What the TensorRT-LLM ensemble returns beside text_output when no output is asked for.
TRT_FIELDS: dict[str, Any] = {
    "context_logits": 0.0,
    "cum_log_probs": 0.0,
    "generation_logits": 0.0,
    "output_log_probs": [0.0],
    "sequence_end": False,
    "sequence_id": 0,
    "sequence_start": False,
}
_WORD_ID = {w: i for i, w in enumerate(WORDS_JSON)}


class NativeRequestError(ValueError):
    """A native body that does not say what to generate (answered 400 in the protocol's shape)."""


def as_completion(body: Any, endpoint: str) -> dict[str, Any]:
    """A ``triton_generate`` or ``sglang_generate`` body as the completions body of the same
    prompt and limits. Streaming is left to the caller (Triton's path decides it)."""
    if not isinstance(body, dict):
        raise NativeRequestError("request body must be a JSON object")
    if endpoint == "triton_generate":
        text = body.get("text_input")
        if not isinstance(text, str):
            raise NativeRequestError("input 'text_input' is missing or not a string")
        if "max_tokens" not in body:
            raise NativeRequestError("input 'max_tokens' is missing")  # the ensemble requires it
        out = {"prompt": text, "max_tokens": body["max_tokens"]}
        low, high = body.get("min_length"), body["max_tokens"]
        if isinstance(low, int) and isinstance(high, int):
            out["min_tokens"] = min(low, high)  # min_length = max_tokens: ignore_eos's spelling
        elif low is not None:
            out["min_tokens"] = low  # let the completions check name what is wrong
        return out
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise NativeRequestError("Either text or input_ids should be provided, not both or neither")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise NativeRequestError("sampling_params must be an object")
    return {
        "prompt": text if text is not None else ids,
        "max_tokens": params.get("max_new_tokens", SGLANG_DEFAULT_MAX_NEW_TOKENS),
        "min_tokens": params.get("min_new_tokens", 0),
        "ignore_eos": params.get("ignore_eos", False),
        "stream": body.get("stream"),
    }


class TritonEncoder:
    """One ``generate_stream`` response: each event carries the step's new word."""

    __slots__ = ("n_reason", "counts", "_head", "_tail", "fields")

    def __init__(self, model: str, prompt_tokens: int, counts: bool, inputs: bool) -> None:
        self.n_reason, self.counts = 0, counts
        self.fields: dict[str, Any] = {**TRT_FIELDS, "model_name": model, "model_version": "1"}
        if inputs:
            self.fields["num_input_tokens"] = prompt_tokens
        self._head = b"data: " + orjson.dumps(self.fields)[:-1] + b',"text_output":'
        self._tail = b',"num_output_tokens":1}\n\n' if counts else b"}\n\n"

    def start(self) -> bytes:
        return b""

    def token(self, word_json: bytes, completion_tokens: int, finish_reason: bytes = b"null") -> bytes:
        return self._head + word_json + self._tail

    def end(self, completion_tokens: int, include_usage: bool, finish_reason: str = "length") -> bytes:
        return b""  # no [DONE]: the end of the response is the end of the stream

    def answer(self, text: str, ids: list[int], finish_reason: str) -> dict[str, Any]:
        out = {**self.fields, "text_output": text}
        if self.counts:
            out["num_output_tokens"] = len(ids)
        return out


def _finish(reason: str, completion_tokens: int) -> dict[str, Any]:
    """SGLang's ``meta_info.finish_reason`` (its ``FINISH_LENGTH`` / ``FINISH_MATCHED_TOKEN``)."""
    if reason == "length":
        return {"type": "length", "length": completion_tokens}
    return {"type": "stop", "matched": EOS_ID}


class SGLangEncoder:
    """One streamed ``/generate`` answer; keeps the text and ids so far as JSON fragments."""

    __slots__ = ("n_reason", "rid", "prompt_tokens", "incremental", "cached", "text", "ids")

    def __init__(self, rid: str, prompt_tokens: int, incremental: bool, cached: Callable[[], int]) -> None:
        self.n_reason = 0
        self.rid, self.prompt_tokens, self.incremental = rid, prompt_tokens, incremental
        self.cached = cached  # the prompt tokens the prefix cache served, once admitted
        self.text = bytearray()  # the output's JSON string body so far (words need no escaping)
        self.ids = bytearray()  # the output ids so far, comma-separated

    def _meta(self, completion_tokens: int, finish: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "id": self.rid,
            "finish_reason": finish,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "cached_tokens": self.cached(),
        }

    def start(self) -> bytes:
        return b""

    def token(self, word_json: bytes, completion_tokens: int, finish_reason: bytes = b"null") -> bytes:
        wid = b"%d" % _WORD_ID[word_json]
        self.text += word_json[1:-1]
        self.ids += b"," + wid if self.ids else wid
        if self.incremental:
            text, ids = word_json, wid
        else:
            text, ids = b'"' + self.text + b'"', bytes(self.ids)
        finish = None if finish_reason == b"null" else _finish(orjson.loads(finish_reason), completion_tokens)
        meta = orjson.dumps(self._meta(completion_tokens, finish))
        return b'data: {"text":%s,"output_ids":[%s],"meta_info":%s}\n\n' % (text, ids, meta)

    def end(self, completion_tokens: int, include_usage: bool, finish_reason: str = "length") -> bytes:
        return DONE

    def answer(self, text: str, ids: list[int], finish_reason: str) -> dict[str, Any]:
        return {
            "text": text,
            "output_ids": ids,
            "meta_info": self._meta(len(ids), _finish(finish_reason, len(ids))),
        }
