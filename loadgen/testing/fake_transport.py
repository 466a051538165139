"""A scripted in-memory ``Transport``: protocol parsers tested on exact byte splits, no server, no clock.

Why: the adapters' stream parsers (SSE framing, ``[DONE]``, per-protocol JSON) must give the same
record however the bytes were cut into reads, and must stamp each token-bearing event with the
arrival time of the read that completed it. A real server cannot choose where TCP splits its
writes, and a real clock cannot be asserted on. ``FakeTransport`` (like httpx's ``MockTransport``)
plays the transport's side of the seam in ``loadgen.backends.transports.base``: it calls
``consumer.head`` once and then ``consumer.feed`` with exactly the scripted bytes and the scripted
``t_ns`` of each read, records every request it was sent, answers GETs for the probes, can raise a
given exception before the response or mid-stream, and classifies exceptions as every real
transport does (``classify_common``).

    fake = FakeTransport(FakeResponse(chunks=reads([b"data: {...}\\n\\n", b"data: [DONE]\\n\\n"])))
    adapter = OpenAIBackend(OpenAIOptions(endpoint="chat", model="m"), fake)
    await adapter.send(spec, rec)
    assert fake.requests[0].json["stream"] is True
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadgen.backends.transports.base import Consumer, classify_common

__all__ = [
    "FakeRequest",
    "FakeResponse",
    "FakeTransport",
    "Handler",
    "Read",
    "reads",
    "split_at",
    "split_every",
]

Read = tuple[int, bytes]
"""One read as the transport hands it over: (arrival time in ns, the bytes of that read)."""


@dataclass(frozen=True, slots=True)
class FakeResponse:
    """One scripted response: status, headers, then the body as timed reads.

    ``error`` (if set) is raised after ``error_after`` reads were fed (None: after all of them),
    as a transport raises on a reset connection or a read timeout. ``head_ns`` is the time passed
    to ``head``; by default the first read's time (0 without reads). For a GET, the body is the
    reads joined."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    chunks: Sequence[Read] = ()
    head_ns: int | None = None
    error: BaseException | None = None
    error_after: int | None = None

    @classmethod
    def json(
        cls, obj: Any, status: int = 200, headers: Mapping[str, str] | None = None, t_ns: int = 0
    ) -> FakeResponse:
        """A whole JSON body in one read (a probe's answer, or an HTTP error body)."""
        hdrs = {"content-type": "application/json", **(headers or {})}
        return cls(status=status, headers=hdrs, chunks=[(t_ns, orjson.dumps(obj))], head_ns=t_ns)

    @property
    def body(self) -> bytes:
        return b"".join(data for _t, data in self.chunks)


@dataclass(frozen=True, slots=True)
class FakeRequest:
    """A request the fake received: method, path, the raw body and its JSON (None if not JSON)."""

    method: str
    path: str
    body: bytes
    json: Any


Handler = Callable[[str, Any], "FakeResponse | BaseException"]
"""Answers a POST: ``(path, parsed JSON body) -> FakeResponse`` (or an exception to raise)."""

Script = FakeResponse | BaseException | Sequence[FakeResponse | BaseException] | Handler


class FakeTransport:
    """A ``Transport`` that answers from a script instead of a socket.

    ``script`` is what a POST gets: one ``FakeResponse`` (every POST), a sequence of them (one per
    POST, in order; running out is an error), or a handler ``(path, json_body) -> FakeResponse``.
    An exception in its place is raised before any byte (a refused connection). ``gets`` maps a
    GET path to its response (or an exception); an unlisted path answers 404. Every request is
    appended to ``requests``; ``aclose`` sets ``closed``."""

    def __init__(
        self,
        script: Script | None = None,
        *,
        gets: Mapping[str, FakeResponse | BaseException] | None = None,
        yield_between_reads: bool = True,
    ) -> None:
        self._handler: Handler | None = None
        self._queue: list[FakeResponse | BaseException] | None = None
        self._always: FakeResponse | BaseException | None = None
        if callable(script):
            self._handler = script
        elif isinstance(script, (FakeResponse, BaseException)):
            self._always = script
        elif script is not None:
            self._queue = list(script)
        self.gets: dict[str, FakeResponse | BaseException] = dict(gets or {})
        # Yield to the event loop between reads, as a socket does, so timeouts and cancellation
        # can land mid-stream; off, a response is fed without suspending.
        self.yield_between_reads = yield_between_reads
        self.requests: list[FakeRequest] = []
        self.closed = False

    @property
    def posts(self) -> list[FakeRequest]:
        return [r for r in self.requests if r.method == "POST"]

    def _answer(self, path: str, parsed: Any) -> FakeResponse | BaseException:
        if self._handler is not None:
            return self._handler(path, parsed)
        if self._always is not None:
            return self._always
        if self._queue:
            return self._queue.pop(0)
        raise AssertionError(f"FakeTransport: no scripted response left for POST {path}")

    async def post_stream(self, path: str, body: bytes, consumer: Consumer) -> None:
        parsed = _parse(body)
        self.requests.append(FakeRequest("POST", path, body, parsed))
        resp = self._answer(path, parsed)
        if isinstance(resp, BaseException):
            raise resp
        chunks = resp.chunks
        head_ns = resp.head_ns if resp.head_ns is not None else (chunks[0][0] if chunks else 0)
        consumer.head(resp.status, _lower(resp.headers), head_ns)
        stop_at = len(chunks) if resp.error_after is None else min(resp.error_after, len(chunks))
        for i in range(stop_at):
            if self.yield_between_reads:
                await asyncio.sleep(0)
            t_ns, data = chunks[i]
            if not consumer.feed(t_ns, data):
                return  # the consumer gave up on the stream: a real transport drops the connection
        if resp.error is not None:
            raise resp.error

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, Mapping[str, str], bytes]:
        self.requests.append(FakeRequest("GET", path, b"", None))
        resp = self.gets.get(path)
        if resp is None:
            return 404, {"content-type": "text/plain"}, b"404: Not Found"
        if isinstance(resp, BaseException):
            raise resp
        if resp.error is not None:
            raise resp.error
        return resp.status, _lower(resp.headers), resp.body

    def classify(self, exc: BaseException) -> tuple[str, str]:
        return classify_common(exc)

    async def aclose(self) -> None:
        self.closed = True


def reads(pieces: Iterable[bytes], t0_ns: int = 1_000_000, step_ns: int = 1_000) -> list[Read]:
    """Timed reads from byte pieces: the k-th piece arrives at ``t0_ns + k * step_ns``."""
    return [(t0_ns + k * step_ns, p) for k, p in enumerate(pieces)]


def split_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """``data`` cut at the given offsets (sorted, deduplicated, 0 and len(data) ignored)."""
    points = sorted({c for c in cuts if 0 < c < len(data)})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def split_every(data: bytes, n: int = 1) -> list[bytes]:
    """``data`` in reads of ``n`` bytes (the last one shorter)."""
    return [data[i : i + n] for i in range(0, len(data), n)]


def _parse(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    # The httptools transport hands over lower-case names; httpx's and aiohttp's look-ups ignore case.
    return {k.lower(): v for k, v in headers.items()}
