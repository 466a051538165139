"""The media of request i: generated images and audio, and a dataset's own files, as ``MediaPart``s.

Everything is a function of (seed, i), like the lengths: request i's counts, sizes and variants
are drawn from ``default_rng([seed, stream, i])``, and a variant's pixels or samples from
``default_rng([seed, stream, size, variant])``, so the same seed gives the same bytes on any
worker and another seed other bytes. Encoding (PNG/JPEG compression, WAV, base64) costs far
more than sending, so each distinct (kind, size, variant) or file is encoded once per process
and kept in a cache bounded by its bytes (``CACHE_BYTES``); a request holds references to the
cached strings, not copies.
"""

from __future__ import annotations

import base64
import io
import wave
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from loadgen.config.media import AudioConfig, ImagesConfig, MediaCount
from loadgen.records import MediaPart

__all__ = ["CACHE_BYTES", "MediaCache", "MediaPlan", "file_part", "make_image", "make_wav"]

CACHE_BYTES = 256 << 20  # of base64 text held per process
# The media's own generator streams: adding images moves no length, prompt or model draw.
_IMAGE_DRAW, _AUDIO_DRAW, _PIXELS, _SAMPLES = 21, 22, 23, 24
MIME = {"png": "png", "jpg": "jpeg", "jpeg": "jpeg", "webp": "webp", "gif": "gif"}
URL_PREFIXES = ("http://", "https://", "data:")


def make_image(width: int, height: int, fmt: str, seed: int, variant: int) -> bytes:
    """A smooth random picture (a coarse grid of random colours, bilinearly enlarged), encoded:
    photo-like in size once compressed, unlike noise, and one of a kind per (seed, size, variant)."""
    from PIL import Image

    rng = np.random.default_rng([seed, _PIXELS, width, height, variant])
    grid = rng.integers(0, 256, size=(height // 32 + 2, width // 32 + 2, 3), dtype=np.uint8)
    img = Image.fromarray(grid, "RGB").resize((width, height), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    if fmt == "jpeg":
        img.save(out, format="JPEG", quality=90)
    else:
        img.save(out, format="PNG")
    return out.getvalue()


def make_wav(seconds: float, rate: int, seed: int, variant: int) -> bytes:
    """``round(seconds * rate)`` samples of three tones and a little noise, 16-bit mono WAV."""
    n = max(1, round(seconds * rate))
    rng = np.random.default_rng([seed, _SAMPLES, round(seconds * 1000), rate, variant])
    t = np.arange(n) / rate
    freqs, phases = rng.uniform(110.0, 880.0, 3), rng.uniform(0.0, 2 * np.pi, 3)
    x = sum(np.sin(2 * np.pi * f * t + p) for f, p in zip(freqs, phases)) / 3
    x = 0.3 * x + 0.02 * rng.standard_normal(n)
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


class MediaCache:
    """Encoded parts by key, least recently used dropped past ``limit`` bytes of payload."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit, self.held = limit, 0
        self._parts: OrderedDict[tuple, MediaPart] = OrderedDict()
        self.encoded = 0  # how many parts were made (a test counts one encode per distinct key)

    def get(self, key: tuple, make: Callable[[], MediaPart]) -> MediaPart:
        part = self._parts.get(key)
        if part is not None:
            self._parts.move_to_end(key)
            return part
        part = make()
        self.encoded += 1
        self._parts[key] = part
        self.held += len(part.payload)
        while self.held > self.limit and len(self._parts) > 1:
            _, old = self._parts.popitem(last=False)
            self.held -= len(old.payload)
        return part


def _count(c: MediaCount, rng: np.random.Generator) -> int:
    return c.value if c.kind == "fixed" else int(rng.integers(c.min, c.max + 1))


class MediaPlan:
    """Request i's generated media: its images, then its audio clips."""

    def __init__(
        self, images: ImagesConfig | None, audio: AudioConfig | None, seed: int, cache: MediaCache
    ) -> None:
        self.images, self.audio, self.seed, self.cache = images, audio, seed, cache

    def warm(self) -> int:
        """Encode every (size, variant) now, before any request goes out, while the cache has
        room: an encode in the middle of the run (a 20 s clip or a 1024 x 768 PNG takes tens of
        ms) would stall the event loop that stamps other streams' tokens. Returns how many."""
        images = self.images.size_choices() if self.images is not None else ()
        n_img = self.images.distinct if self.images is not None else 0
        clips = self.audio.duration_s if self.audio is not None else ()
        n_clip = self.audio.distinct if self.audio is not None else 0
        todo: list[tuple[str, float, int, int]] = [
            ("image", w, h, v) for w, h in images for v in range(n_img)
        ]
        todo += [("audio", s, 0, v) for s in clips for v in range(n_clip)]
        done = 0
        for kind, a, b, v in todo:
            if self.cache.held >= self.cache.limit // 2:
                break  # the rest are made when first asked for, as the cache makes room
            if kind == "image":
                self._image(int(a), b, v)
            else:
                assert self.audio is not None
                self._clip(a, self.audio.sample_rate, v)
            done += 1
        return done

    def media(self, i: int) -> tuple[MediaPart, ...]:
        out: list[MediaPart] = []
        if self.images is not None:
            cfg = self.images
            rng = np.random.default_rng([self.seed, _IMAGE_DRAW, i])
            sizes = cfg.size_choices()
            for _ in range(_count(cfg.count, rng)):
                w, h = sizes[int(rng.integers(len(sizes)))]
                out.append(self._image(w, h, int(rng.integers(cfg.distinct))))
        if self.audio is not None:
            acfg = self.audio
            rng = np.random.default_rng([self.seed, _AUDIO_DRAW, i])
            for _ in range(_count(acfg.count, rng)):
                s = acfg.duration_s[int(rng.integers(len(acfg.duration_s)))]
                out.append(self._clip(s, acfg.sample_rate, int(rng.integers(acfg.distinct))))
        return tuple(out)

    def _image(self, w: int, h: int, variant: int) -> MediaPart:
        assert self.images is not None
        fmt = self.images.format

        def make() -> MediaPart:
            raw = make_image(w, h, fmt, self.seed, variant)
            return MediaPart("image", f"data:image/{fmt};base64,{_b64(raw)}", fmt, len(raw), w * h)

        return self.cache.get(("image", w, h, fmt, variant), make)

    def _clip(self, seconds: float, rate: int, variant: int) -> MediaPart:
        def make() -> MediaPart:
            raw = make_wav(seconds, rate, self.seed, variant)
            n = (len(raw) - 44) // 2  # a canonical PCM WAV: a 44-byte header, 2 bytes a sample
            return MediaPart("audio", _b64(raw), "wav", len(raw), seconds=n / rate)

        return self.cache.get(("audio", seconds, rate, variant), make)


def file_part(kind: str, ref: str, pixels: int, seconds: float, cache: MediaCache) -> MediaPart:
    """A dataset's medium: a URL passed through as given (never fetched; an image's ``data:``
    URL has its bytes counted), or a local file (checked when the dataset was read) sent inline.
    ``pixels``/``seconds``: what reading the dataset found (0 for a URL)."""
    if ref.startswith(URL_PREFIXES):
        b64 = ref.partition(",")[2] if ref.startswith("data:") else ""
        nbytes = len(b64) * 3 // 4 - b64[-2:].count("=")
        return MediaPart(kind, ref, "url", nbytes, pixels, seconds)

    def make() -> MediaPart:
        raw = Path(ref).read_bytes()
        if kind == "audio":
            return MediaPart("audio", _b64(raw), "wav", len(raw), seconds=seconds)
        fmt = MIME[Path(ref).suffix.lower().lstrip(".")]
        return MediaPart("image", f"data:image/{fmt};base64,{_b64(raw)}", fmt, len(raw), pixels)

    return cache.get(("file", kind, ref), make)
