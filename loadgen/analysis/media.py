"""The ``media`` block: what images and audio the measured requests carried, from the records.

Every measured request counts, whatever its outcome: its media went out either way, and a
server that refuses large images (an http_400) has still been sent them. Rates are over the
run's window, like every other rate. The prompt tokens are the server's (usage), since only it
knows how many tokens an image is to its model.
"""

from __future__ import annotations

import numpy as np

from loadgen.analysis.counts import filled
from loadgen.analysis.table import RecordTable
from loadgen.summary.media import Media


def media(table: RecordTable, seconds: float) -> Media | None:
    """The block, or None when no measured request carried media."""
    keep = ~table.column("warmup")
    images = table.column("images")[keep]
    clips = table.column("audio_clips")[keep]
    if not (images.any() or clips.any()):
        return None
    nbytes = table.column("media_bytes")[keep]
    mpx = np.nan_to_num(table.column("megapixels")[keep].astype(float))
    audio = np.nan_to_num(table.column("audio_s")[keep].astype(float))
    n = int(keep.sum())
    ok = keep & table.column("ok")
    prompt = filled(table, "prompt_tokens")[ok]

    def rate(x: float) -> float | None:
        return float(x / seconds) if seconds > 0 else None

    return {
        "requests": int(((images > 0) | (clips > 0)).sum()),
        "images": int(images.sum()),
        "audio_clips": int(clips.sum()),
        "media_bytes": int(nbytes.sum()),
        "megapixels": float(mpx.sum()),
        "audio_s": float(audio.sum()),
        "images_per_s": rate(float(images.sum())),
        "megapixels_per_s": rate(float(mpx.sum())),
        "audio_s_per_s": rate(float(audio.sum())),
        "media_bytes_per_s": rate(float(nbytes.sum())),
        "per_request": {
            "images": float(images.sum() / n),
            "audio_clips": float(clips.sum() / n),
            "media_bytes": float(nbytes.sum() / n),
            "megapixels": float(mpx.sum() / n),
            "audio_s": float(audio.sum() / n),
        },
        "prompt_tokens_per_request": float(prompt.mean()) if len(prompt) else None,
    }
