"""A dataset row's media columns (``images``, ``audio``): local files checked when the dataset
is read, URLs kept as given.

A run that discovers a missing image at request 40,000 has wasted its warm-up and its load, so
every local file is opened here, once: an image's header gives its size (Pillow reads no
pixels), a WAV's header its duration. Relative paths are taken from the dataset file's folder,
so a dataset and its media move together. URLs (``http://``, ``https://``, and for images
``data:``) are passed to the server untouched: loadgen never fetches them.
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.errors import LoadgenError

__all__ = ["MEDIA_COLUMNS", "MediaRef", "read_media"]

MEDIA_COLUMNS = {"images": "image", "audio": "audio"}  # row key -> MediaPart.kind
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
_URLS = {"image": ("http://", "https://", "data:image/"), "audio": ("http://", "https://")}


@dataclass(frozen=True, slots=True)
class MediaRef:
    """One medium a row names: its kind, the URL or resolved local path, and what its header
    said (pixels, seconds; 0 for a URL)."""

    kind: str
    ref: str
    pixels: int = 0
    seconds: float = 0.0


def read_media(
    where: str, base: Path, obj: dict[str, Any], error: type[LoadgenError]
) -> tuple[MediaRef, ...]:
    """The media a row names, images first; ``where`` ("data/x.jsonl line 7") opens any error,
    which names the field and the item, e.g. ``images[1] 'cat.png': no such file``."""
    out: list[MediaRef] = []
    for key, kind in MEDIA_COLUMNS.items():
        value = obj.get(key)
        if value is None:
            continue
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
            raise error(f"{where}: {key} is {value!r}, expected a path or URL, or a list of them")
        for j, ref in enumerate(items):
            out.append(_one(f"{where}: {key}[{j}] {ref!r}", base, kind, ref, error))
    return tuple(out)


def _one(where: str, base: Path, kind: str, ref: str, error: type[LoadgenError]) -> MediaRef:
    if ref.startswith(_URLS[kind]):
        return MediaRef(kind, ref)
    path = Path(ref) if Path(ref).is_absolute() else base / ref
    if not path.is_file():
        raise error(
            f"{where}: no such file {str(path)!r} (relative paths start at the dataset's folder; "
            "http(s) URLs are passed through)"
        )
    if kind == "image":
        return _image(where, path, error)
    return _audio(where, path, error)


def _image(where: str, path: Path, error: type[LoadgenError]) -> MediaRef:
    from PIL import Image, UnidentifiedImageError

    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise error(f"{where}: expected an image file named {', '.join(IMAGE_SUFFIXES)}")
    try:
        with Image.open(path) as img:
            w, h = img.size
    except (OSError, UnidentifiedImageError) as exc:
        raise error(f"{where}: not a readable image ({exc})") from None
    return MediaRef("image", str(path), w * h)


def _audio(where: str, path: Path, error: type[LoadgenError]) -> MediaRef:
    if path.suffix.lower() != ".wav":
        raise error(f"{where}: local audio must be a .wav file (or give an http(s) URL)")
    try:
        with wave.open(str(path), "rb") as w:
            seconds = w.getnframes() / w.getframerate()
    except (OSError, EOFError, wave.Error) as exc:
        raise error(f"{where}: not a readable WAV file ({exc})") from None
    return MediaRef("audio", str(path), seconds=seconds)
