"""The "Media" section: the images and audio a run's requests carried (runs with media only).

Read from ``summary.json``'s ``media`` block: totals, rates per second of the window and the
mean per request, beside the mean prompt tokens the server counted (its usage includes its own
count of each image's and clip's tokens, which only it knows).
"""

from __future__ import annotations

from loadgen.report.blocks import Section, Table, Text, num
from loadgen.summary import Summary

TITLE = "Media"
HEADER = ("", "images", "megapixels", "audio clips", "audio s", "MB sent")


def media_section(summary: Summary) -> Section | None:
    """The media table; None for a run whose requests carried none."""
    m = summary.get("media")
    if not m:
        return None
    per = m["per_request"]

    def mb(v: float | None) -> float | None:
        return None if v is None else v / 1e6

    rows = (
        (
            "total",
            str(m["images"]),
            num(m["megapixels"]),
            str(m["audio_clips"]),
            num(m["audio_s"], 1),
            num(mb(m["media_bytes"])),
        ),
        (
            "per second",
            num(m["images_per_s"]),
            num(m["megapixels_per_s"]),
            "-",
            num(m["audio_s_per_s"]),
            num(mb(m["media_bytes_per_s"])),
        ),
        (
            "per request",
            num(per["images"]),
            num(per["megapixels"]),
            num(per["audio_clips"]),
            num(per["audio_s"]),
            num(mb(per["media_bytes"]), 3),
        ),
    )
    tokens = m["prompt_tokens_per_request"]
    return Section(
        TITLE,
        (
            Text(
                f"{m['requests']} measured requests carried media (sent whatever their outcome). "
                "MB are the media files' bytes sent inline; base64 makes them 4/3 of that on the wire. "
                f"Mean prompt tokens per ok request: {num(tokens, 1)}, the server's count, "
                "which includes its own image and audio tokens."
            ),
            Table(HEADER, rows, "l" + "r" * (len(HEADER) - 1)),
        ),
    )
