"""What every protocol adapter shares: the backend base class that sends one request, the
timeout, cancellation and error handling around the transport seam, and the small pieces a
stream consumer needs.

``StreamingBackend`` implements the send once: ``body(spec)`` -> JSON -> a fresh stream consumer
(``STREAM``, a ``SSEResponse`` subclass: ``head``, ``feed``, ``finish``) -> ``send_stream``
(``send.py``), which sends the body through the transport, times it out, and turns every
failure into an error class on the record. A protocol adapter (``openai.py``, ``triton.py``,
``sglang.py``) declares its name, path, body, consumer, probe and what the profile, CLI and
report need to know of it, and registers itself (``registry.py``); the adapters differ only in
what their bytes mean.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import quote

import orjson

from loadgen import records as R
from loadgen.backends.bodies import BodyError, BodyTemplate, RecordedBodies
from loadgen.backends.identity import ServerIdentity
from loadgen.backends.send import send_stream
from loadgen.backends.stream import Live, SSEResponse, fail
from loadgen.backends.transports import make_transport
from loadgen.backends.transports.base import Transport, TransportOptions
from loadgen.errors import RunError
from loadgen.redact import redact_url

# Response headers worth keeping: they name the engine, its version or the proxy in front.
_SERVER_HEADERS = re.compile(
    r"^(server|via|x-.*(version|engine|backend|model|served|server).*|openai-.*)$", re.I
)


class ProbeError(RunError):
    """The server cannot be benchmarked as configured (unreachable, not ready, no such model)."""


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
    # A stream without the protocol's end marker fails (``no_done``) even when its answer
    # finished: a test of the server's conformance, not of its speed.
    require_done: bool = False


class TargetLike(Protocol):
    """What a backend reads of the profile's ``target`` section. ``config.TargetConfig`` is one;
    the backends never import the profile (the profile imports their registry)."""

    @property
    def ignore_eos(self) -> bool | str: ...
    @property
    def require_done(self) -> bool: ...
    @property
    def include_usage(self) -> bool: ...
    @property
    def continuous_usage_stats(self) -> bool: ...
    @property
    def extra_body(self) -> Mapping[str, Any]: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def template(self) -> str | None: ...
    @property
    def template_file(self) -> str | None: ...
    @property
    def payloads(self) -> str | None: ...


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
      ``STREAM(rec, keep_texts)``.
    - ``token_ids``: it takes token-id prompts (``prompt_format: token_ids``); else ``text_only``
      says why not. ``messages``: its prompts go as chat messages. ``server_tokenize``: the
      server's ``/tokenize`` can fit its prompts to exact lengths (counting the messages, with
      the chat template, when ``messages``). ``needs_model``: ``target.model`` must be given.
      ``model_mix``: its body names the model each request asks for (``RequestSpec.model``),
      so ``workload.models`` can mix adapters over it. ``tool_use``: it sends a request's
      function tools and response_format (``workload.tools``, ``workload.response_format``) and
      reads the tool calls of its answer. ``media``: its user message carries images and audio
      as content parts (``RequestSpec.media``: ``workload.images``/``audio``).
    - ``streamed``: its answer streams tokens, so TTFT, ITL, TPOT and output tokens/s describe
      it; False for a protocol answered whole (embeddings, rerank: ``pooling.py``), whose runs
      report request latency and items per second instead (``metric_defs``' ``applies``);
      ``query``: such a request also carries a query its items are scored against (rerank).
    - ``engine``: the engine the protocol itself names in the server's identity (None: the
      server's ``/v1/models`` listing says). ``SOURCES``: the keys of ``conditions.server`` its
      probe fills with a server's answer, and the path each came from (the report's rows).
    - ``options(target, model)`` when its requests take more from the target than
      ``BackendOptions`` holds.
    - ``HEADERS``: headers every request of the protocol carries (Anthropic's version), and
      ``auth_headers(key)`` when ``target.api_key_env``'s key goes elsewhere than a bearer token.
    - ``wire``: what carries its requests. "http" (the default): the run's HTTP transport
      (``target.transport``). Anything else names a transport the protocol brings itself
      (``triton_grpc``: "grpc", a gRPC channel); it then overrides ``open_transport`` and
      ``payload`` (its request is not JSON), and its ``URL_SCHEMES`` say what ``target.url`` may be.

    The hot path is ``send``: one ``payload`` (``body`` as JSON), one consumer, the transport.
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
    model_mix: ClassVar[bool] = False
    streamed: ClassVar[bool] = True
    query: ClassVar[bool] = False
    tool_use: ClassVar[bool] = False
    media: ClassVar[bool] = False
    engine: ClassVar[str | None] = None
    SOURCES: ClassVar[tuple[tuple[str, str], ...]] = (("version", "/version"), ("models", "/v1/models"))
    HEADERS: ClassVar[Mapping[str, str]] = {}
    wire: ClassVar[str] = "http"
    URL_SCHEMES: ClassVar[tuple[str, ...]] = ("http", "https")

    __slots__ = ("opts", "transport", "live", "count_tokens", "keep_texts", "path", "custom")

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
        # target.template or target.payloads: the body the user wrote, sent instead of ``body``.
        self.custom: BodyTemplate | RecordedBodies | None = None

    @classmethod
    def auth_headers(cls, api_key: str) -> dict[str, str]:
        """The headers that carry the key of ``target.api_key_env``: a bearer token, as OpenAI
        and every OpenAI-compatible server take it."""
        return {"Authorization": f"Bearer {api_key}"}

    @classmethod
    def options(cls, target: TargetLike, model: str) -> BackendOptions:
        return BackendOptions(
            model=model,
            ignore_eos=target.ignore_eos is not False,
            extra_body=target.extra_body,
            timeout_s=target.timeout_s,
            require_done=target.require_done,
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
        made = cls(cls.options(target, model), transport, live, count_tokens)
        if target.template is not None:
            made.custom = BodyTemplate(target.template, target.template_file or "target.template")
        elif target.payloads is not None:
            made.custom = RecordedBodies(target.payloads)
        return made

    @classmethod
    def open_transport(cls, kind: str, opts: TransportOptions) -> Transport:
        """The transport this protocol's requests go over: the run's HTTP transport of ``kind``
        (``target.transport``); a protocol of another ``wire`` opens its own."""
        return make_transport(kind, opts)

    async def ready(self) -> None:
        """Anything the backend must learn from the server once, before its first request
        (``triton_grpc``: the model's inputs); the runner and every worker await it."""

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        """The JSON body of ``spec``'s request."""
        raise NotImplementedError

    def payload(self, spec: R.RequestSpec) -> bytes:
        """The bytes ``spec``'s request sends: its ``body`` as JSON, or the user's own body."""
        if self.custom is not None:
            return self.custom.render(spec, self.opts.model)
        return orjson.dumps(self.body(spec))

    async def send(self, spec: R.RequestSpec, rec: R.RequestRecord) -> None:
        """Fill ``rec``; never raises, except CancelledError when the run itself is stopping."""
        stream = self.STREAM(rec, self.keep_texts)
        self.prime(stream)
        try:
            payload = self.payload(spec)
        except BodyError as exc:  # the template failed on this request alone: counted, not fatal
            fail(rec, R.CLIENT, str(exc))
            return
        await send_stream(
            self.transport,
            self.path,
            payload,
            stream,
            rec,
            spec,
            self.opts.timeout_s,
            self.count_tokens,
        )

    def prime(self, stream: SSEResponse) -> None:
        """Tell a fresh consumer what its request asked for that its end is judged by."""
        stream.strict = self.opts.require_done

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
