"""What every protocol adapter shares: the backend base class that sends one request, the
timeout, cancellation and error handling around the transport seam, and the small pieces a
stream consumer needs.

``StreamingBackend`` implements the send once: ``body(spec)`` -> JSON -> a fresh stream consumer
(``STREAM``, a ``SSEResponse`` subclass: ``head``, ``feed``, ``finish``) -> ``send_stream``,
which sends the body through the transport, times it out, and turns every failure into an error
class on the record. A protocol adapter (``openai.py``, ``triton.py``, ``sglang.py``) declares
its name, path, body, consumer, probe and what the profile, CLI and report need to know of it,
and registers itself (``registry.py``); the adapters differ only in what their bytes mean.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import quote

import orjson

from loadgen import records as R
from loadgen.backends.identity import ServerIdentity
from loadgen.backends.stream import Live, SSEResponse, fail
from loadgen.backends.transports.base import Transport
from loadgen.clock import now_ns
from loadgen.errors import RunError
from loadgen.redact import redact_url

# Response headers worth keeping: they name the engine, its version or the proxy in front.
_SERVER_HEADERS = re.compile(
    r"^(server|via|x-.*(version|engine|backend|model|served|server).*|openai-.*)$", re.I
)


class ProbeError(RunError):
    """The server cannot be benchmarked as configured (unreachable, not ready, no such model)."""


class StreamConsumer(Protocol):
    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None: ...
    def feed(self, t_ns: int, data: bytes) -> bool: ...
    def resent(self, t_ns: int, reason: str) -> None: ...
    def finish(self, t_end: int) -> None: ...


async def stream_request(
    transport: Transport,
    path: str,
    payload: bytes,
    consumer: StreamConsumer,
    rec: R.RequestRecord,
    timeout_s: float,
) -> None:
    """Send one request and push its response into ``consumer``; fill ``rec`` on failure.

    Never raises, except CancelledError when the run itself is stopping (the record is then
    marked cancelled first). The per-request timeout cancels the task and is told apart from
    the run's own cancellation, so a slow server costs one ``timeout``, never the run."""
    task = asyncio.current_task()
    assert task is not None, "stream_request runs inside a task"
    timed_out = False

    def expire() -> None:
        nonlocal timed_out
        timed_out = True
        task.cancel()

    handle = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        rec.t_send_ns = now_ns()
        await transport.post_stream(path, payload, consumer)
        consumer.finish(now_ns())
    except asyncio.CancelledError:
        if not timed_out:
            fail(rec, R.CANCELLED, "the run stopped while this request was in flight")
            raise
        if hasattr(task, "uncancel"):
            task.uncancel()
        fail(rec, R.TIMEOUT, f"no complete response within timeout_s={timeout_s}")
    except Exception as exc:  # noqa: BLE001 - a failing server costs one request, never the run
        if rec.error_class is None:
            cls, msg = transport.classify(exc)
            fail(rec, cls, msg)
    finally:
        handle.cancel()


async def send_stream(
    transport: Transport,
    path: str,
    payload: bytes,
    stream: SSEResponse,
    rec: R.RequestRecord,
    spec: R.RequestSpec,
    timeout_s: float,
    count_tokens: Callable[[str], int] | None,
) -> None:
    """``stream_request``, then the counts of an ok record: per-chunk tokens from a local
    tokenizer when the server gave none (``stream.texts`` kept them), output and prompt
    tokens from the server or, failing that, the chunks and the workload's target."""
    await stream_request(transport, path, payload, stream, rec, timeout_s)
    if not rec.ok:
        return
    if count_tokens is not None and stream.texts is not None and rec.token_source != "continuous_usage":
        rec.chunk_tokens[:] = [max(1, count_tokens(s)) for s in stream.texts]
        rec.token_source = "tokenizer"
    finish_counts(rec, spec)


def finish_counts(rec: R.RequestRecord, spec: R.RequestSpec) -> None:
    """Output tokens default to the chunks' sum, prompt tokens to the workload's target."""
    if rec.output_tokens is None:
        rec.output_tokens = sum(rec.chunk_tokens)
    if rec.prompt_tokens is None:
        rec.prompt_tokens = spec.prompt_tokens
    else:
        rec.prompt_tokens_source = "usage"


def merge_extra(body: dict[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """``target.extra_body`` over the defaults; a null value removes a default field (a Triton
    model without the TRT-LLM ensemble's ``bad_words`` input, say)."""
    for k, v in (extra or {}).items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return body


async def get_json(
    transport: Transport, path: str, timeout_s: float = 10.0
) -> tuple[int, Mapping[str, str], Any]:
    """GET ``path``; the status, headers and JSON body (None when it is not JSON)."""
    status, headers, body = await transport.get(path, timeout_s=timeout_s)
    try:
        return status, headers, orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return status, headers, None


def unreachable(transport: Transport, url: str, path: str, exc: BaseException) -> ProbeError:
    """The probe's first request failed: say how, and what is most likely wrong."""
    cls, msg = transport.classify(exc)
    if cls == R.READ and url.startswith("http://"):
        # A TLS port hangs up on a plain-HTTP request without a word: the likeliest cause.
        hint = "the server hung up without answering: if this port speaks TLS, use https://"
    else:
        hint = "is the server running, and is target.url right?"
    return ProbeError(f"cannot reach {redact_url(url)}{path} ({cls}: {msg}); {hint}")


def server_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The response headers that say who the server is (engine, version, proxy)."""
    return {k.lower(): v for k, v in headers.items() if _SERVER_HEADERS.match(k)}


# ----------------------------------------------------------------------------- the backend
@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What a backend's requests take from the profile's ``target`` section."""

    model: str
    ignore_eos: bool = True
    extra_body: Mapping[str, Any] | None = None  # JSON merged into every request body
    timeout_s: float = 600.0


class TargetLike(Protocol):
    """What a backend reads of the profile's ``target`` section. ``config.TargetConfig`` is one;
    the backends never import the profile (the profile imports their registry)."""

    @property
    def ignore_eos(self) -> bool: ...
    @property
    def include_usage(self) -> bool: ...
    @property
    def continuous_usage_stats(self) -> bool: ...
    @property
    def extra_body(self) -> Mapping[str, Any]: ...
    @property
    def timeout_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What a probe heard: ``info`` is summary.json's ``conditions.server`` (the server's own
    answers, JSON as it sent them), ``model`` the model the run requests."""

    info: dict[str, Any]
    model: str
    identity: ServerIdentity


B = TypeVar("B", bound="StreamingBackend")


class StreamingBackend:
    """One protocol: a ``RequestSpec`` in, one streamed request, its ``RequestRecord`` filled.

    A subclass declares (class attributes, then ``body`` and ``probe``):

    - ``name``: the protocol's ``target.endpoint`` value; ``description``: its CLI help.
    - ``PATH``: where requests go; ``{model}`` in it is replaced by the URL-quoted model.
    - ``STREAM``: the ``SSEResponse`` subclass that reads one response, made per request as
      ``STREAM(rec, live, keep_texts)``.
    - ``token_ids``: it takes token-id prompts (``prompt_format: token_ids``); else ``text_only``
      says why not. ``messages``: its prompts go as chat messages. ``server_tokenize``: the
      server's ``/tokenize`` can fit its prompts to exact lengths (counting the messages, with
      the chat template, when ``messages``). ``needs_model``: ``target.model`` must be given.
    - ``engine``: the engine the protocol itself names in the server's identity (None: the
      server's ``/v1/models`` listing says). ``SOURCES``: the keys of ``conditions.server`` its
      probe fills with a server's answer, and the path each came from (the report's rows).
    - ``options(target, model)`` when its requests take more from the target than
      ``BackendOptions`` holds.

    The hot path is ``send``: one ``body``, one ``orjson.dumps``, one consumer, the transport.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    PATH: ClassVar[str] = ""
    STREAM: ClassVar[type[SSEResponse]]
    token_ids: ClassVar[bool] = False
    text_only: ClassVar[str] = ""
    messages: ClassVar[bool] = False
    server_tokenize: ClassVar[bool] = False
    needs_model: ClassVar[bool] = False
    engine: ClassVar[str | None] = None
    SOURCES: ClassVar[tuple[tuple[str, str], ...]] = (("version", "/version"), ("models", "/v1/models"))

    __slots__ = ("opts", "transport", "live", "count_tokens", "keep_texts", "path")

    def __init__(
        self,
        opts: BackendOptions,
        transport: Transport,
        live: Live | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.opts = opts
        self.transport = transport
        self.live = live or Live()
        # A local tokenizer counts each chunk's tokens after the stream when the server gave none.
        self.count_tokens = count_tokens
        self.keep_texts = count_tokens is not None
        self.path = self.PATH.format(model=quote(opts.model, safe=""))

    @classmethod
    def options(cls, target: TargetLike, model: str) -> BackendOptions:
        return BackendOptions(
            model=model,
            ignore_eos=target.ignore_eos,
            extra_body=target.extra_body,
            timeout_s=target.timeout_s,
        )

    @classmethod
    def for_target(
        cls: type[B],
        target: TargetLike,
        model: str,
        transport: Transport,
        live: Live,
        count_tokens: Callable[[str], int] | None = None,
    ) -> B:
        """The backend for a profile's ``target`` section and the model its probe settled on."""
        return cls(cls.options(target, model), transport, live, count_tokens)

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        """The JSON body of ``spec``'s request."""
        raise NotImplementedError

    async def send(self, spec: R.RequestSpec, rec: R.RequestRecord) -> None:
        """Fill ``rec``; never raises, except CancelledError when the run itself is stopping."""
        stream = self.STREAM(rec, self.live, self.keep_texts)
        await send_stream(
            self.transport,
            self.path,
            orjson.dumps(self.body(spec)),
            stream,
            rec,
            spec,
            self.opts.timeout_s,
            self.count_tokens,
        )

    @classmethod
    async def probe(cls, transport: Transport, url: str, model: str | None) -> ProbeResult:
        """What the server says about itself, the model to request (``model``, else the one the
        server names) and who it is. Raises ProbeError when it cannot be benchmarked as asked."""
        raise NotImplementedError

    @classmethod
    def identify(cls, info: Mapping[str, Any]) -> ServerIdentity:
        """The identity in what ``probe`` heard: by default the OpenAI listing's (see
        ``ServerIdentity.from_listing``), under ``engine`` when the protocol names it."""
        return ServerIdentity.from_listing(info, cls.engine)
