"""A request's media as the content parts of its user message: OpenAI's chat shape, which vLLM,
SGLang and TensorRT-LLM serve too.

An image is ``{"type": "image_url", "image_url": {"url": ...}}`` (a ``data:`` URL or the user's
own); inline audio is ``{"type": "input_audio", "input_audio": {"data": base64, "format": "wav"}}``
and a user's audio URL vLLM's ``{"type": "audio_url", "audio_url": {"url": ...}}``. The text goes
first, then the media in the order the workload drew them.
"""

from __future__ import annotations

from typing import Any

from loadgen.records import MediaPart


def part(m: MediaPart) -> dict[str, Any]:
    """One medium's content part."""
    if m.kind == "image":
        return {"type": "image_url", "image_url": {"url": m.payload}}
    if m.fmt == "url":
        return {"type": "audio_url", "audio_url": {"url": m.payload}}
    return {"type": "input_audio", "input_audio": {"data": m.payload, "format": m.fmt}}


def with_media(messages: list[dict[str, Any]], media: tuple[MediaPart, ...]) -> list[dict[str, Any]]:
    """``messages`` with the last user message's text turned into parts and ``media`` after it
    (a new list: the spec's messages stay as the workload built them)."""
    out = list(messages)
    for k in range(len(out) - 1, -1, -1):
        if out[k].get("role") == "user":
            text = out[k].get("content") or ""
            out[k] = {**out[k], "content": [{"type": "text", "text": text}, *map(part, media)]}
            return out
    return out + [{"role": "user", "content": [*map(part, media)]}]
