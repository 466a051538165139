"""What the server is: engine, version, served model and its context length.

Each protocol adapter's probe builds a ``ServerIdentity`` from what it heard (the OpenAI
``/v1/models`` listing, ``/version`` and the response headers through ``from_listing``; a
protocol that names its engine, or serves its own metadata, builds one directly). Once the run's
requests are known, ``server.context.fit_context`` counts those that would not fit the context
and gives the ``conditions.server.identity`` block of summary.json.

A leaf of loadgen: it imports only the records, so the adapters can build what it defines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from loadgen.records import RequestSpec

# Beyond this many requests (an unbounded duration run), prompts are neither fitted to the
# server's tokenizer nor checked against its context length: they stay approximate.
FIT_LIMIT = 20_000

# /v1/models' owned_by -> the engine's name.
_OWNERS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "loadgen-sim": "loadgen-sim",
    "tensorrt_llm": "tensorrt-llm",
    "llamacpp": "llama.cpp",
}


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """Who answered. The fields are the keys of summary.json's ``conditions.server.identity``."""

    engine: str | None = None
    version: str | None = None
    served_model: str | None = None
    root: str | None = None  # the model's path or hub name, when the server gives it
    max_model_len: int | None = None
    server_header: str | None = None
    # llama.cpp: the parallel slots its context is split over (-np); max_model_len is then the
    # context of one slot (-c divided by the slots), the most one request can use.
    slots: int | None = None
    # Requests whose prompt plus max_tokens exceed max_model_len; None: not counted (no limit known).
    requests_over_max_model_len: int | None = None

    @classmethod
    def from_listing(cls, info: Mapping[str, object], engine: str | None = None) -> ServerIdentity:
        """From an OpenAI-style probe's ``info``: the first model ``/v1/models`` lists (``models``),
        ``/version`` (``version``) and the ``server`` header. ``engine``, when the protocol names
        it, wins over the listing's ``owned_by``."""
        models = info.get("models")
        data = models.get("data") if isinstance(models, Mapping) else None
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], Mapping) else {}
        owned_by = first.get("owned_by")
        props = info.get("props") if isinstance(info.get("props"), Mapping) else {}
        assert isinstance(props, Mapping)
        meta = first.get("meta") if isinstance(first.get("meta"), Mapping) else {}
        assert isinstance(meta, Mapping)
        return cls(
            engine=engine or _OWNERS.get(str(owned_by).lower()) or text(owned_by),
            version=version_of(info.get("version")) or text(props.get("build_info")),
            served_model=text(first.get("id")),
            root=text(first.get("root")) or text(props.get("model_path")),
            # vLLM and SGLang list max_model_len; llama.cpp says its per-slot context in /props
            # (and in its listing's meta.n_ctx).
            max_model_len=integer(first.get("max_model_len"))
            or integer(props.get("n_ctx_slot"))
            or integer(meta.get("n_ctx")),
            server_header=header(info),
            slots=integer(props.get("total_slots")),
        )

    def as_dict(self) -> dict[str, object]:
        """The summary's block: every field, ``requests_over_max_model_len`` only when counted."""
        out: dict[str, object] = {
            "engine": self.engine,
            "version": self.version,
            "served_model": self.served_model,
            "root": self.root,
            "max_model_len": self.max_model_len,
            "server_header": self.server_header,
        }
        if self.slots is not None:
            out["slots"] = self.slots
        if self.requests_over_max_model_len is not None:
            out["requests_over_max_model_len"] = self.requests_over_max_model_len
        return out


class SpecSource(Protocol):
    def request(self, i: int) -> RequestSpec: ...


def version_of(answer: object) -> str | None:
    """The version in a ``/version``-like answer: ``{"version": ...}`` or the bare value."""
    if isinstance(answer, Mapping):
        answer = answer.get("version")
    return text(answer)


def header(info: Mapping[str, object]) -> str | None:
    """The ``server`` response header a probe kept (``info["headers"]``), if any."""
    headers = info.get("headers")
    return text(headers.get("server")) or None if isinstance(headers, Mapping) else None


def text(v: object) -> str | None:
    """A JSON scalar as a string (None stays None; objects and lists are not names)."""
    if v is None or isinstance(v, (Mapping, list)):
        return None
    return v if isinstance(v, str) else str(v)


def integer(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None
