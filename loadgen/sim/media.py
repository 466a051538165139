"""Images and audio in a chat prompt: decoded, counted, and charged as prompt tokens.

A vision-language model turns each image into tokens its language model prefills like text, so
an image's cost is its token count. The rule here is Qwen2-VL's (Qwen/Qwen2-VL-7B-Instruct,
``Qwen2VLImageProcessor.smart_resize``): the image is resized to multiples of
``factor = patch_size x merge_size`` (14 x 2 = 28 pixels), each side rounded to the nearest
multiple, then scaled down (floor) when over ``max_pixels`` or up (ceil) when under
``min_pixels``, aspect ratio kept; every 28 x 28 tile is 2 x 2 ViT patches merged into one
token; ``<|vision_start|>`` and ``<|vision_end|>`` add 2. A 512 x 512 image is 18 x 18 + 2 = 326
tokens. Audio follows Qwen2-Audio's rate: Whisper's encoder makes 50 frames a second, pooled by
2, so 25 tokens a second (rounded up) + 2 for ``<|audio_bos|>``/``<|audio_eos|>``.

Only the data it receives is read: a ``data:`` URL is decoded and its header read with Pillow
(no pixels are decoded); inline audio is a WAV whose header gives its duration. An image URL
is never fetched: it is counted at ``url_image_size``, audio at ``url_audio_s``. The vision
encoder's own compute is not modelled: media cost prefill tokens only.
"""

from __future__ import annotations

import binascii
import io
import math
import wave
import zlib
from collections.abc import Hashable
from typing import Any

from .config import SimConfig


class MediaError(ValueError):
    """Media the simulator cannot read: a 400 naming the part."""


class MediaSeen:
    """What one request's media were, for its usage and its ground-truth line."""

    __slots__ = ("images", "audio_clips", "media_bytes", "media_tokens")

    def __init__(self) -> None:
        self.images = self.audio_clips = self.media_bytes = self.media_tokens = 0

    def log(self) -> dict[str, int]:
        return {
            "images": self.images,
            "audio_clips": self.audio_clips,
            "media_bytes": self.media_bytes,
            "media_tokens": self.media_tokens,
        }


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's resize: (height, width) as multiples of ``factor`` within the pixel bounds."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class MediaRule:
    """Tokens per image and per clip, from the config; ``tokens(part, seen)`` reads one part."""

    IMAGE_MARKERS = 2  # <|vision_start|>, <|vision_end|>
    AUDIO_MARKERS = 2  # <|audio_bos|>, <|audio_eos|>

    def __init__(self, config: SimConfig) -> None:
        self.factor = config.image_patch_size * config.image_merge_size
        self.min_pixels, self.max_pixels = config.image_min_pixels, config.image_max_pixels
        self.per_s = config.audio_tokens_per_s
        self.url_size, self.url_s = config.url_image_size, config.url_audio_s

    def image_tokens(self, width: int, height: int) -> int:
        h, w = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return (h // self.factor) * (w // self.factor) + self.IMAGE_MARKERS

    def audio_tokens(self, seconds: float) -> int:
        return math.ceil(seconds * self.per_s) + self.AUDIO_MARKERS

    def tokens(self, part: dict[str, Any], seen: MediaSeen) -> list[Hashable] | None:
        """An image's or clip's token identities (the same medium, the same identities, so a
        prefix cache can share them); None for a part of another type (text)."""
        kind = part.get("type")
        if kind == "image_url":
            url = _url(part, "image_url")
            if url.startswith("data:"):
                b64 = url.partition(",")[2]
                w, h = _image_size(b64)
                key = _digest(b64.encode())
                seen.media_bytes += _decoded_len(b64)
            else:
                (w, h), key = self.url_size, _digest(url.encode())
            n, tag = self.image_tokens(w, h), ("<|image|>", key)
            seen.images += 1
        elif kind in ("input_audio", "audio_url"):
            if kind == "audio_url":
                seconds, tag = self.url_s, ("<|audio|>", _digest(_url(part, "audio_url").encode()))
            else:
                inner = part.get("input_audio")
                if not isinstance(inner, dict) or not isinstance(inner.get("data"), str):
                    raise MediaError("input_audio must be an object with base64 data")
                if inner.get("format", "wav") != "wav":
                    raise MediaError(f"the simulator reads wav audio only, got {inner.get('format')!r}")
                b64 = inner["data"]
                seconds, tag = _wav_seconds(b64), ("<|audio|>", _digest(b64.encode()))
                seen.media_bytes += _decoded_len(b64)
            n = self.audio_tokens(seconds)
            seen.audio_clips += 1
        else:
            return None
        seen.media_tokens += n
        return [(*tag, k) for k in range(n)]


def _url(part: dict[str, Any], key: str) -> str:
    inner = part.get(key)
    url = inner.get("url") if isinstance(inner, dict) else None
    if not isinstance(url, str) or not url:
        raise MediaError(f"{key} must be an object with a url")
    return url


# Only a medium's header is decoded: its size or duration is all the token rule needs, and
# decoding a megabyte of base64 (about 1 ms) would hold the event loop that paces every stream.
_HEAD_CHARS = 1 << 16  # 48 KB decoded: an image's or a WAV's header, EXIF and all


def _head(b64: str, what: str) -> bytes:
    head = b64[:_HEAD_CHARS]
    try:
        return binascii.a2b_base64(head[: len(head) - len(head) % 4])
    except (binascii.Error, ValueError):
        raise MediaError(f"{what}: the data is not valid base64") from None


def _decoded_len(b64: str) -> int:
    """Bytes the base64 text decodes to (padded, without line breaks, as data URLs are)."""
    return len(b64) * 3 // 4 - b64[-2:].count("=")


def _image_size(b64: str) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    raw = _head(b64, "image_url")
    for attempt in range(2):
        try:
            with Image.open(io.BytesIO(raw)) as img:
                return img.size
        except (OSError, UnidentifiedImageError):
            if attempt or len(b64) <= _HEAD_CHARS:
                break
            try:  # the header lies past the first 48 KB: decode it all
                raw = binascii.a2b_base64(b64)
            except (binascii.Error, ValueError):
                break
    raise MediaError("image_url: cannot identify the image data")


def _wav_seconds(b64: str) -> float:
    try:
        with wave.open(io.BytesIO(_head(b64, "input_audio")), "rb") as w:
            return w.getnframes() / w.getframerate()
    except (EOFError, wave.Error):
        raise MediaError("input_audio: not a readable WAV file") from None


def _digest(data: bytes) -> tuple[int, int]:
    """The medium's identity in the prefix cache: its length and CRC-32 (a megabyte in about
    0.1 ms; a cryptographic hash would hold the event loop that paces every stream ten times
    longer, and a collision here only costs a simulated cache hit)."""
    return len(data), zlib.crc32(data)
