"""A pure, incremental Server-Sent Events decoder over raw bytes.

The caller timestamps each read *before* feeding it here, so every event completed by that read
carries the read's arrival time; nothing in this module looks at a clock or parses JSON.
Only the ``data`` field matters to LLM streams; ``event``, ``id``, ``retry`` and comments are
skipped, and several ``data:`` lines in one event are joined with a newline as the spec says.
"""

from __future__ import annotations

_SEP = b"\n\n"


class SSEDecoder:
    """Feed raw bytes, get back the data payloads of the events those bytes completed."""

    __slots__ = ("_buf", "_pending_cr", "junk", "junk_sample")

    def __init__(self) -> None:
        self._buf = b""
        self._pending_cr = False
        # Blocks with lines that are not SSE fields at all: a server that answers 200 with
        # something other than an event stream. The backend turns this into malformed_stream.
        self.junk = 0
        self.junk_sample = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        if b"\r" in chunk or self._pending_cr:
            chunk = self._normalise(chunk)
        buf = self._buf + chunk if self._buf else chunk
        if _SEP not in buf:
            self._buf = buf
            return []
        blocks = buf.split(_SEP)
        self._buf = blocks.pop()
        out = []
        for block in blocks:
            # Fast path: one "data: ..." line, which is what every LLM server sends.
            if block[:5] == b"data:" and b"\n" not in block:
                out.append(block[6:] if block[5:6] == b" " else block[5:])
            elif block:
                data = self._parse_block(block)
                if data is not None:
                    out.append(data)
        return out

    def flush(self) -> list[bytes]:
        """Events left when the stream closed without a final blank line."""
        buf, self._buf = self._buf, b""
        data = self._parse_block(buf.strip(b"\n")) if buf.strip() else None
        return [] if data is None else [data]

    @property
    def pending(self) -> bytes:
        return self._buf

    def _normalise(self, chunk: bytes) -> bytes:
        # CRLF and lone CR are line ends too; a CR at the end of one read may pair with an LF
        # at the start of the next, so it is held back rather than guessed at.
        if self._pending_cr:
            chunk = b"\r" + chunk
            self._pending_cr = False
        if chunk.endswith(b"\r"):
            chunk = chunk[:-1]
            self._pending_cr = True
        return chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    def _parse_block(self, block: bytes) -> bytes | None:
        data_lines = []
        for line in block.split(b"\n"):
            if not line or line[:1] == b":":
                continue
            name, sep, value = line.partition(b":")
            if name != b"data":
                if name not in _KNOWN_FIELDS:
                    self.junk += 1
                    self.junk_sample = self.junk_sample or line[:120]
                continue
            if sep and value[:1] == b" ":
                value = value[1:]
            data_lines.append(value)
        if not data_lines:
            return None
        return b"\n".join(data_lines)


_KNOWN_FIELDS = frozenset((b"event", b"id", b"retry"))
