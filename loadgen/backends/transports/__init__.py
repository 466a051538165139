"""HTTP transports, one module per library over the seam in ``base.py``.

``httptools`` (the default: an asyncio Protocol over llhttp, the cheapest per streamed token),
``aiohttp`` and ``httpx``; ``bench/client_overhead.py`` measures them against each other.
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.backends.transports.aiohttp_client import AiohttpTransport
from loadgen.backends.transports.base import Transport, TransportOptions
from loadgen.backends.transports.httptools_pool import HttptoolsTransport
from loadgen.backends.transports.httpx_client import HttpxTransport

__all__ = [
    "TRANSPORTS",
    "AiohttpTransport",
    "HttptoolsTransport",
    "HttpxTransport",
    "Transport",
    "TransportOptions",
    "make_transport",
]

# The one list of transport names: the profile's choices and the CLI's come from it.
TRANSPORTS: dict[str, Callable[[TransportOptions], Transport]] = {
    "httptools": HttptoolsTransport,
    "aiohttp": AiohttpTransport,
    "httpx": HttpxTransport,
}


def make_transport(kind: str, opts: TransportOptions) -> Transport:
    return TRANSPORTS[kind](opts)
