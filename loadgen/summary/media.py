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
    """images a request"""
    audio_clips: float
    """audio clips a request"""
    media_bytes: float
    """bytes of media files sent inline a request (their base64 on the wire is 4/3 of this)"""
    megapixels: float
    """megapixels a request (images of known size: generated or local files)"""
    audio_s: float
    """seconds of audio a request"""


@with_config(DOCS)
class Media(TypedDict, total=True):
    """runs whose requests carried images or audio (workload.images / workload.audio / a dataset's
    media): totals over the measured requests, sent whatever their outcome, and their rates per
    second of the run's window (loadgen/analysis/media.py); an image URL passed through counts as
    an image with no bytes or pixels"""

    requests: Annotated[int, Field(ge=0)]
    """measured requests that carried any media"""
    images: Annotated[int, Field(ge=0)]
    """images sent"""
    audio_clips: Annotated[int, Field(ge=0)]
    """audio clips sent"""
    media_bytes: Annotated[int, Field(ge=0)]
    """bytes of the media files sent inline"""
    megapixels: float
    """megapixels sent (images of known size)"""
    audio_s: float
    """seconds of audio sent"""
    images_per_s: float | None
    """images sent per second of the window; null for a window of no length"""
    megapixels_per_s: float | None
    """megapixels sent per second of the window"""
    audio_s_per_s: float | None
    """seconds of audio sent per second of the window"""
    media_bytes_per_s: float | None
    """bytes of media sent inline per second of the window"""
    per_request: MediaPerRequest
    prompt_tokens_per_request: float | None
    """mean prompt tokens of the measured ok requests: the server's usage count when it gave one,
    which includes its own count of image and audio tokens; null without ok requests"""
