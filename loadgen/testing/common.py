"""What the scripted test server's protocols share: its ground-truth log, SSE framing, pacing
that never sends early, and a connection reset as a crashing server does it.

Like the simulator, the test server imports nothing from the client side, so a bug shared
between an encoder and a decoder cannot hide itself.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from typing import Any

WORDS = ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta")


class Log:
    """Per response id: when the server received it and wrote each event (perf_counter_ns)."""

    def __init__(self) -> None:
        self.entries: dict[str, dict] = {}

    def open(self, rid: str, recv_ns: int, request: Any, prompt_tokens: int) -> dict[str, Any]:
        """The entry of a response about to stream: when it was received, from which client
        port, and the lists its events are logged into."""
        peer = request.transport.get_extra_info("peername") if request.transport else None
        entry: dict[str, Any] = {
            "id": rid,
            "recv_ns": recv_ns,
            "peer_port": peer[1] if peer else None,
            "chunk_ns": [],
            "chunk_tokens": [],
            "first_token_ns": None,
            "end_ns": None,
            "prompt_tokens": prompt_tokens,
        }
        self.entries[rid] = entry
        return entry


def event(obj: dict) -> bytes:
    """One SSE event carrying ``obj`` as compact JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def reset_connection(request: Any) -> None:
    """Abort the request's TCP connection with a reset (RST), as a crashing server would."""
    sock = request.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    request.transport.abort()


async def pace_until(deadline_ns: int) -> None:
    """Sleep until ``deadline_ns`` (perf_counter_ns), never before it: event-loop timers can
    fire a little early, and a token sent early would make a client look faster than it is."""
    delay = deadline_ns - time.perf_counter_ns()
    if delay > 0:
        await asyncio.sleep(delay / 1e9)
    while time.perf_counter_ns() < deadline_ns:
        await asyncio.sleep(0)
