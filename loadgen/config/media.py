"""Images and audio in chat prompts: how many a request carries and what they are like.

A vision or audio model's cost is set by its media as much as by its text: a 1024 x 1024 image
is about a thousand prompt tokens to Qwen2-VL, and the server decodes and encodes it before any
prefill starts. ``workload.images`` and ``workload.audio`` add generated media to every chat
request's user message, drawn from the seed (count, size, which of ``distinct`` variants), so
two runs of a profile send the same bytes. A dataset can name its own media instead
(docs/workloads.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from loadgen.config.base import Int, StrictModel, field_msg

MAX_MEDIA = 64  # per request: past this no served model takes them (vLLM's limit_mm_per_prompt)
MAX_SIDE = 8192  # pixels
MAX_AUDIO_S = 600.0
MAX_DISTINCT = 10_000


class MediaCount(StrictModel):
    """How many a request carries: ``fixed`` (value) or ``uniform`` over min..max inclusive."""

    # fixed or uniform.
    kind: Literal["fixed", "uniform"] = "fixed"
    # How many per request (fixed).
    value: Int = Field(1, ge=0, le=MAX_MEDIA)
    # Fewest per request (uniform).
    min: Int = Field(0, ge=0, le=MAX_MEDIA)
    # Most per request (uniform).
    max: Int = Field(0, ge=0, le=MAX_MEDIA)

    @model_validator(mode="after")
    def _ordered(self):
        if self.kind == "uniform" and self.max < self.min:
            raise field_msg("max", f"must be >= min ({self.min}), got {self.max}")
        return self


def _count_is_fixed(v: object) -> object:
    if isinstance(v, int) and not isinstance(v, bool):
        return {"kind": "fixed", "value": v}
    return v


Count = Annotated[MediaCount, BeforeValidator(_count_is_fixed)]
Side = Annotated[Int, Field(ge=1, le=MAX_SIDE)]


class ImagesConfig(StrictModel):
    """Generated images (Pillow): ``count`` a request, each ``width`` x ``height`` or one of
    ``sizes`` (``[[w, h], ...]``, drawn uniformly), encoded as ``format``. Each image is one of
    ``distinct`` seeded variants of its size, encoded once per run and reused, so the client
    does not spend its time compressing pixels; a server that caches decoded images by content
    (vLLM's multimodal cache) will serve repeats faster, so raise ``distinct`` to defeat it."""

    # Images per request: a number or {kind: uniform, min, max}.
    count: Count = MediaCount()
    # Image width in pixels (one size; or sizes).
    width: Side = 512
    # Image height in pixels.
    height: Side = 512
    # Several [width, height] pairs, drawn from per image.
    sizes: tuple[tuple[Side, Side], ...] | None = Field(None, min_length=1, max_length=64)
    # png or jpeg.
    format: Literal["png", "jpeg"] = "png"
    # Different images generated per size (each encoded once, before the run).
    distinct: Int = Field(16, ge=1, le=MAX_DISTINCT)

    @model_validator(mode="before")
    @classmethod
    def _one_size(cls, v: object) -> object:
        if isinstance(v, dict) and v.get("sizes") is not None and ({"width", "height"} & v.keys()):
            raise ValueError("give width and height, or sizes: [[w, h], ...], not both")
        return v

    def size_choices(self) -> tuple[tuple[int, int], ...]:
        return self.sizes if self.sizes is not None else ((self.width, self.height),)


def _seconds_list(v: object) -> object:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (v,)
    return v


Seconds = Annotated[float, Field(gt=0, le=MAX_AUDIO_S)]


class AudioConfig(StrictModel):
    """Generated audio clips (numpy tones and noise, 16-bit mono WAV): ``count`` a request, each
    ``duration_s`` long (a number, or a list to draw from uniformly), at ``sample_rate``. Like
    images, each clip is one of ``distinct`` seeded variants of its duration, encoded once."""

    # Audio clips per request: a number or {kind: uniform, min, max}.
    count: Count = MediaCount()
    # Clip length in seconds, or a list to draw from.
    duration_s: Annotated[tuple[Seconds, ...], BeforeValidator(_seconds_list)] = Field(
        (5.0,), min_length=1, max_length=64
    )
    # Samples per second of the 16-bit mono WAV.
    sample_rate: Int = Field(16_000, ge=1000, le=192_000)
    # Different clips generated per duration (each encoded once, before the run).
    distinct: Int = Field(16, ge=1, le=MAX_DISTINCT)
