"""What a server's refusal means, and the fix: the hint shown beside its own message.

Servers word the same refusal differently: vLLM's and OpenAI's ``{"error": {"message"}}``,
FastAPI's 422 ``{"detail": [{"loc": [...], "msg"}]}`` (Hugging Face's ``transformers serve``:
"Unexpected fields in the request: {'ignore_eos'}"), llama.cpp's and SGLang's plain text. The
rules below read the error class and the message the record kept (``stream.error_text``), and
each names the server that worded it so. A refusal no rule knows gets no hint: its own message
is what the user sees.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# The extension fields loadgen may send that a strict OpenAI server refuses, and the setting that
# stops sending each.
EXTENSION_FIELDS: dict[str, str] = {
    "ignore_eos": "set target.ignore_eos: auto (drop when refused) or false",
    "min_tokens": "remove min_tokens from target.extra_body",
    "stream_options": "set target.include_usage: false (--set target.include_usage=false)",
    "continuous_usage_stats": "set target.continuous_usage_stats: false",
    "top_k": "remove top_k from target.extra_body",
}
_FIELD = re.compile(r"\b(" + "|".join(EXTENSION_FIELDS) + r")\b")
_CONTEXT = re.compile(
    # vLLM/OpenAI, llama.cpp ("exceeds the available context size"), transformers serve ("the
    # model takes at most 2048"), SGLang, TGI.
    r"maximum context length|context length|context window|context size|max_model_len|too long|"
    r"exceeds? the (?:available )?(?:model|context)|longer than|n_ctx|takes at most",
    re.I,
)
_MODEL = re.compile(
    r"model .{0,80}(?:does not exist|not found|unknown|not loaded|not served)|no such model", re.I
)


def hint(error_class: str, message: str | None) -> str | None:
    """The fix for a refusal of class ``error_class`` whose server message is ``message``, or
    None when no rule knows it."""
    text = message or ""
    for rule in _RULES:
        found = rule(error_class, text)
        if found:
            return found
    return None


def rejected_fields(message: str | None) -> tuple[str, ...]:
    """The extension fields a refusal's message names, in the order of ``EXTENSION_FIELDS``."""
    named = set(_FIELD.findall(message or ""))
    return tuple(f for f in EXTENSION_FIELDS if f in named)


def _field(cls: str, text: str) -> str | None:
    # vLLM takes these; OpenAI's API, transformers serve (FastAPI "Unexpected fields"), TGI and
    # most hosted APIs refuse a field they do not define with a 400 or 422.
    if not cls.startswith("http_4"):
        return None
    fields = rejected_fields(text)
    if not fields:
        return None
    fixes = "; ".join(f"{f}: {EXTENSION_FIELDS[f]}" for f in fields)
    return f"the server does not take {', '.join(fields)} (an extension of vLLM's): {fixes}"


def _context(cls: str, text: str) -> str | None:
    # vLLM: "This model's maximum context length is N tokens"; llama.cpp: "the request exceeds the
    # available context size"; OpenAI: "maximum context length".
    if cls.startswith("http_4") and _CONTEXT.search(text):
        return (
            "the prompt plus max_tokens is longer than the server's context: shorten "
            "workload.input_tokens / output_tokens, or set target.context_overflow: trim"
        )
    return None


def _model(cls: str, text: str) -> str | None:
    # vLLM: 404 "The model `x` does not exist."; OpenAI: "The model ... does not exist".
    if cls in ("http_404", "http_400", "http_422") and _MODEL.search(text):
        return (
            "the server does not serve that model: set target.model (--model) to a name its /v1/models lists"
        )
    return None


def _endpoint(cls: str, text: str) -> str | None:
    # A 404 or 405 that names no model: the path itself is not served (a completions-only server,
    # Triton without the generate extension).
    if cls in ("http_404", "http_405"):
        return (
            "the server does not serve this endpoint: pick the protocol it speaks with "
            "target.endpoint (--endpoint; `loadgen profiles` lists them)"
        )
    return None


def _auth(cls: str, text: str) -> str | None:
    if cls in ("http_401", "http_403"):
        return (
            "the server wants credentials: set target.api_key_env to the name of the variable holding the key"
        )
    return None


_RULES: tuple[Callable[[str, str], str | None], ...] = (_field, _context, _model, _endpoint, _auth)
