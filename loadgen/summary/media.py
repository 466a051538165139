"""The ``media`` block: the images and audio a run's requests carried, and how fast it sent them."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, with_config
from typing_extensions import TypedDict

from loadgen.summary.common import DOCS


@with_config(DOCS)
class MediaPerRequest(TypedDict, total=True):
    """means over the measured requests (those without media count as 0)"""

    images: float
    audio_clips: float
    media_bytes: float
    """bytes of media files sent inline (their base64 on the wire is 4/3 of this)"""
    megapixels: float
    audio_s: float


@with_config(DOCS)
class Media(TypedDict, total=True):
    """runs whose requests carried images or audio (workload.images / workload.audio / a dataset's
    media): totals over the measured requests, sent whatever their outcome, and their rates per
    second of the run's window (loadgen/analysis/media.py); an image URL passed through counts as
    an image with no bytes or pixels"""

    requests: Annotated[int, Field(ge=0)]
    """measured requests that carried any media"""
    images: Annotated[int, Field(ge=0)]
    audio_clips: Annotated[int, Field(ge=0)]
    media_bytes: Annotated[int, Field(ge=0)]
    """bytes of the media files sent inline"""
    megapixels: float
    audio_s: float
    """seconds of audio sent"""
    images_per_s: float | None
    megapixels_per_s: float | None
    audio_s_per_s: float | None
    """seconds of audio sent per second of the window"""
    media_bytes_per_s: float | None
    per_request: MediaPerRequest
    prompt_tokens_per_request: float | None
    """mean prompt tokens of the measured ok requests: the server's usage count when it gave one,
    which includes its own count of image and audio tokens; null without ok requests"""
