"""The server under test: where it is, how to speak to it, and what loadgen may send it.

Everything that goes on the wire is checked here, once: a URL must say http:// or https://
(``localhost:8000`` would otherwise go to port 80 and be recorded as given), header names must
be HTTP tokens and values latin-1 without CR or LF (a CR/LF in a value injects headers on the
wire), the protocol and transport must be registered ones.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from loadgen.backends import bodies, registry
from loadgen.backends.base import StreamingBackend
from loadgen.backends.transports import TRANSPORTS
from loadgen.backends.transports.base import Transport
from loadgen.config.base import StrDict, StrictModel, existing_file, field_msg
from loadgen.records import RequestSpec

# RFC 9110 token characters: what a header name may be made of.
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
RESET_METHODS = ("POST", "GET")  # what a reset hook may send: the transports speak both


def reset_hook(hook: str) -> tuple[str, str]:
    """``"POST /reset_prefix_cache"`` (or a bare path, POSTed) as (method, path); ValueError
    saying the form when it is not one."""
    method, _, path = hook.strip().rpartition(" ")
    method = method.strip().upper() or "POST"
    if method not in RESET_METHODS or not path.startswith("/") or _CONTROL.search(path) or "://" in path:
        raise ValueError(
            f"{hook[:60]!r} is not a reset hook: write a path on the target starting with /, "
            "optionally after POST or GET, such as /reset_prefix_cache (vLLM) or "
            "'POST /flush_cache' (SGLang)"
        )
    return method, path


_ENV_NAME = re.compile(r"^(?:[A-Z_][A-Z0-9_]*|[a-z_][a-z0-9_]*)$")


class TargetConfig(StrictModel):
    """The server under test. ``url: null`` means loadgen starts its built-in simulator."""

    # The server's base URL (http:// or https://); none: the built-in simulator serves the run.
    url: str | None = None
    # Several replicas of one server (--url given more than once): the load is spread over them
    # by ``balance``, each record names its replica, the summary's ``replicas`` block gives
    # each one's figures (docs/guides/replicas.md). ``url`` becomes the first of them.
    urls: tuple[str, ...] | None = None
    # How each request picks its replica (runner/replicas.py): round_robin (in turn),
    # least_in_flight (the one with the fewest requests in flight, ties in turn) or
    # session_affinity (a multi-turn session's turns stay on its first turn's replica and its
    # prefix cache; single requests in turn).
    balance: Literal["round_robin", "least_in_flight", "session_affinity"] = "round_robin"
    # A replica that failed this many requests in a row with a connect error is out of rotation
    # for eject_s, then gets one trial request (target.urls only).
    eject_after: int = Field(3, ge=1, le=1000)
    # How long an ejected replica stays out before its trial; doubled at each failed trial, at
    # most 8x.
    eject_s: float = Field(1.0, gt=0, le=3600)
    # The wire protocol: a name in loadgen.backends.registry (chat, completions: OpenAI-compatible;
    # triton_generate: Triton's generate extension; sglang_generate: SGLang's /generate; ...).
    endpoint: str = "chat"
    # The model (or adapter) name requests ask for; none: the first one the server's /v1/models
    # lists.
    model: str | None = None
    # The NAME of the environment variable holding the API key (never the key itself); sent as the
    # protocol's auth header and scrubbed from every file.
    api_key_env: str | None = None
    # Extra HTTP headers on every request (a value that looks secret is scrubbed from every file).
    headers: StrDict = {}
    # JSON merged into every request body (a null removes a default field), e.g. {temperature: 0}.
    extra_body: dict[str, Any] = {}
    # Ask the server to generate exactly the requested output length (ignore_eos / min_tokens).
    # auto: ask, and when the preflight request is refused for the field (Hugging Face's
    # transformers serve, hosted APIs) run without it, say so and record it (output lengths are
    # then the server's, max_tokens caps them); true: a refusal stops the run; false: never ask.
    ignore_eos: bool | Literal["auto"] = "auto"
    # Fail a stream that ends without its protocol's end marker (data: [DONE], message_stop) even
    # when its answer finished: for testing a server's conformance. Off, such a stream is ok and
    # counted (counts.stream_ends.no_terminator), as the OpenAI SDK accepts it.
    require_done: bool = False
    # Before the load, send one request (not measured) in the run's exact body shape: a server that
    # refuses it stops the run with its own reason and the fix, before any load (--no-preflight).
    preflight: bool = True
    # Ask for the stream's final usage block (stream_options.include_usage): the server's own token
    # counts.
    include_usage: bool = True
    # Ask vLLM for usage on every chunk: exact tokens per event (continuous_usage_stats).
    continuous_usage_stats: bool = False
    # text, or token_ids: exact-length token-id prompts (completions endpoints that accept them).
    prompt_format: Literal["text", "token_ids"] = "text"
    # Requests whose prompt plus max_tokens exceed the server's context (max_model_len; for
    # llama.cpp the context of one slot), known before the run: refuse the run and say which
    # (default), trim them to fit (max_tokens first, then the prompt), or send them anyway.
    context_overflow: Literal["refuse", "trim", "send"] = "refuse"
    # HTTP client, a name in loadgen.backends.transports.TRANSPORTS: httptools (asyncio Protocol
    # over llhttp, the cheapest per streamed token), aiohttp, or httpx.
    transport: str = "httptools"
    # Per-request limit for the whole response; past it the request is a timeout error, never the
    # run's.
    timeout_s: float = Field(600.0, gt=0, le=86_400)
    # Limit for opening a connection (TCP and TLS).
    connect_timeout_s: float = Field(10.0, gt=0, le=3600)
    # Limit between two reads of a response: a stalled stream fails its request after it.
    read_timeout_s: float = Field(120.0, gt=0, le=86_400)
    # https:// only: a PEM file of CAs to trust (a private CA), or no verification at all for
    # a lab server (recorded in the run's conditions and flagged in the report).
    ca_bundle: str | None = None
    # Verify the server's certificate (false: a lab server; recorded in the conditions and flagged
    # in the report).
    verify_tls: bool = True
    # Headers whose values are secrets beyond the usual ones (Authorization, X-Api-Key, cookies,
    # any name with key/token/secret/auth...): their values are scrubbed from every stored file.
    secret_headers: tuple[str, ...] = ()
    # Hooks run (with the run's headers, credentials included) before the load starts, and
    # before each repeat: the server's cache flush, so no run inherits the last one's warm prefix
    # cache. Each is "METHOD /path" (POST or GET) or a bare "/path" (POST); one or a list.
    # vLLM: /reset_prefix_cache; SGLang: /flush_cache (the built-in simulator serves both).
    reset_path: tuple[str, ...] | None = None
    # The request body as a Jinja2 template (sandboxed), sent instead of the one the endpoint's
    # adapter builds; the answer is still read by that adapter. It sees id, model, prompt,
    # token_ids, messages, input_tokens, output_tokens, max_tokens and session {id, turn,
    # messages}, and |tojson writes a value as JSON. It must render JSON, with "stream": true
    # for a streamed endpoint: checked when the profile loads (docs/guides/real-servers.md).
    template: str | None = None
    # A file holding that template, relative to the profile (read when the profile loads; the
    # recorded profile carries its text in template).
    template_file: str | None = None
    # A JSON Lines file of recorded request bodies, relative to the profile, sent as they are:
    # request i sends line i modulo the lines (a longer run cycles through the file).
    payloads: str | None = None

    @field_validator("reset_path", mode="before")
    @classmethod
    def _one_or_more(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("reset_path")
    @classmethod
    def _hooks(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if not v else tuple(" ".join(reset_hook(h)) for h in v)

    @model_validator(mode="before")
    @classmethod
    def _read_template(cls, v: object) -> object:
        """The template file's text, read once: the resolved profile carries it in template."""
        if not (isinstance(v, dict) and isinstance(v.get("template_file"), str)):
            return v
        path = v["template_file"]
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ValueError(f"template_file: cannot read {path!r} ({why or exc})") from None
        if v.get("template") not in (None, text):
            raise ValueError("template and template_file are both set; give the template one way")
        return {**v, "template": text}

    @model_validator(mode="after")
    def _custom_body_renders(self):
        """A custom body is checked before any request: it compiles, renders a request like the
        run's as JSON, and asks for a stream where the endpoint's adapter would."""
        if self.template is None and self.payloads is None:
            return self
        key = "payloads" if self.template is None else "template_file" if self.template_file else "template"
        backend = registry.backend(self.endpoint)
        if self.template is not None and self.payloads is not None:
            raise field_msg("payloads", "template and payloads are both set; send one kind of body")
        if backend.wire != "http":
            raise field_msg(key, f"endpoint {self.endpoint} sends no JSON body; use an HTTP endpoint")
        if self.extra_body:
            raise field_msg("extra_body", f"{key} is the whole body; write these fields into it instead")
        spec = probe_spec(backend.messages, self.prompt_format == "token_ids")
        streamed = backend.streamed and _adapter_streams(backend, self, spec)
        try:
            if self.template is not None:
                made = bodies.BodyTemplate(self.template, self.template_file or "target.template")
                bodies.check(made.render(spec, "model"), f"{made.name} (rendered)", streamed)
            else:
                assert self.payloads is not None
                replay = bodies.RecordedBodies(existing_file(self.payloads, "a JSON Lines file") or "")
                for k, body in enumerate(replay.bodies, 1):
                    bodies.check(body, f"{self.payloads}, body {k}", streamed)
        except bodies.BodyError as exc:
            raise field_msg(key, str(exc)) from None
        return self

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        return None if v is None else check_url(v)

    @field_validator("urls", mode="before")
    @classmethod
    def _one_or_more_urls(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("urls")
    @classmethod
    def _replica_urls(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if not v:
            return None
        urls = tuple(check_url(u) for u in v)
        if len(set(urls)) != len(urls):
            raise ValueError("a URL is listed twice; each replica once")
        return urls

    @model_validator(mode="before")
    @classmethod
    def _url_is_first_replica(cls, data: Any) -> Any:
        # Everything that reads target.url (the simulator when it is null, the conditions, the
        # server's /metrics) sees the first replica; urls alone says which replicas there are.
        if isinstance(data, dict) and data.get("urls"):
            urls = [data["urls"]] if isinstance(data["urls"], str) else list(data["urls"])
            url = data.get("url")
            if url is not None and url != urls[0]:
                raise field_msg("url", "give the replicas as target.urls alone (url is then its first)")
            data = {**data, "url": urls[0]}
        return data

    @model_validator(mode="after")
    def _replicas_fit_the_protocol(self):
        schemes = registry.backend(self.endpoint).URL_SCHEMES
        for u in self.urls or ():
            if urlsplit(u).scheme not in schemes:
                raise field_msg("urls", f"{u[:60]!r} is not a URL for target.endpoint {self.endpoint}")
        return self

    @property
    def replica_urls(self) -> tuple[str, ...]:
        """Every URL the load goes to: ``urls``, or ``url`` alone (empty: the simulator)."""
        return self.urls or ((self.url,) if self.url else ())

    @field_validator("headers")
    @classmethod
    def _wire_safe_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _TOKEN.match(name):
                raise ValueError(
                    f"header name {name[:40]!r} is not an HTTP token (letters, digits "
                    f"and !#$%&'*+.^_`|~-; no spaces, colons or line breaks)"
                )
            if _CONTROL.search(value):
                raise ValueError(
                    f"header {name}: the value holds a control character (CR, LF, "
                    f"NUL, ...), which would inject bytes into the request; remove it"
                )
            try:
                value.encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(
                    f"header {name}: the value has characters HTTP/1.1 cannot carry "
                    f"(not latin-1); percent-encode or base64 it"
                ) from None
        return v

    @field_validator("ca_bundle")
    @classmethod
    def _bundle_exists(cls, v: str | None) -> str | None:
        return existing_file(v, "a PEM file of CA certificates")

    @field_validator("endpoint")
    @classmethod
    def _registered_protocol(cls, v: str) -> str:
        return _one_of(v, registry.names())

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, v: str) -> str:
        return _one_of(v, tuple(TRANSPORTS))

    @field_validator("api_key_env")
    @classmethod
    def _env_name_not_key(cls, v: str | None) -> str | None:
        # Keys pasted here would be written verbatim into every result file; never echo them.
        if v is not None and (v.startswith("sk-") or len(v) > 64 or not _ENV_NAME.match(v)):
            raise ValueError(
                "this looks like a key, not the name of an environment variable; put the key in "
                "an environment variable (export OPENAI_API_KEY=...) and give its name here "
                "(api_key_env: OPENAI_API_KEY)"
            )
        return v

    @model_validator(mode="after")
    def _tls_settings_agree(self):
        if self.ca_bundle is not None and not self.verify_tls:
            raise field_msg("verify_tls", "false ignores ca_bundle; keep one of them")
        return self

    @model_validator(mode="after")
    def _url_fits_the_protocol(self):
        schemes = registry.backend(self.endpoint).URL_SCHEMES
        scheme = urlsplit(self.url).scheme if self.url else None
        if scheme is not None and scheme not in schemes:
            grpc = " or ".join(registry.names(lambda b: scheme in b.URL_SCHEMES))
            raise field_msg(
                "url",
                f"{scheme}:// is not a URL for target.endpoint {self.endpoint} (it takes "
                f"{', '.join(s + '://' for s in schemes)}){f'; {scheme}:// is for {grpc}' if grpc else ''}",
            )
        return self

    @model_validator(mode="after")
    def _token_ids_need_completions(self):
        backend = registry.backend(self.endpoint)
        if self.prompt_format == "token_ids" and not backend.token_ids:
            takes = " or ".join(registry.names(lambda b: b.token_ids))
            why = backend.text_only or f"the {self.endpoint} endpoint only takes text"
            raise field_msg("prompt_format", f"token_ids needs endpoint: {takes} ({why})")
        return self


def probe_spec(messages: bool, token_ids: bool) -> RequestSpec:
    """A request like the run's, to render a custom body against before any is sent."""
    prompt: str | list[int] = list(range(1, 17)) if token_ids else "probe prompt"
    chat = [{"role": "user", "content": "probe prompt"}] if messages else None
    return RequestSpec(id=0, prompt=prompt, messages=chat, prompt_tokens=16, output_tokens=16)


def _adapter_streams(backend: type[StreamingBackend], target: TargetConfig, spec: RequestSpec) -> bool:
    """Whether the endpoint's own adapter sends ``"stream": true`` in its body."""
    made = backend(backend.options(target, "model"), cast(Transport, None))
    return made.body(spec).get("stream") is True


def _one_of(value: str, names: tuple[str, ...]) -> str:
    if value not in names:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ValueError(f"{shown} is not one of {', '.join(names)}")
    return value


_SCHEMES = ("http", "https", "grpc", "grpcs")


def check_url(v: str) -> str:
    """``v`` if it is an http://, https:// (or, for a gRPC protocol, grpc:// or grpcs://) URL
    with a host and a valid port; else a ValueError that says what to write instead. Which
    schemes the endpoint takes is checked with the endpoint (``_url_fits_the_protocol``)."""
    if _CONTROL.search(v) or " " in v:
        raise ValueError(f"{v[:60]!r} holds spaces or control characters")
    if "://" not in v:
        raise ValueError(f"{v[:60]!r} has no scheme; write http://{v[:60]} (or https://)")
    try:
        parts = urlsplit(v)
        port = parts.port
    except ValueError as exc:
        raise ValueError(
            f"{v[:60]!r} is not a valid URL ({exc}); e.g. http://127.0.0.1:8000 or http://[::1]:8000"
        ) from None
    if parts.scheme not in _SCHEMES:
        raise ValueError(
            f"scheme {parts.scheme!r} is not supported; use http:// or https:// "
            "(grpc:// for target.endpoint triton_grpc)"
        )
    if not parts.hostname:
        raise ValueError(f"{v[:60]!r} names no host; e.g. http://127.0.0.1:8000")
    if port == 0:
        raise ValueError(f"{v[:60]!r}: port must be 1-65535")
    return v
