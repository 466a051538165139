"""The protocol registry is the one list of wire protocols: the profile's endpoint choices, the
CLI's, which endpoints can fit prompts with /tokenize and the report's rows all come from it, so
a protocol registered once (a subclass in this module) is offered everywhere, and gone again
once unregistered."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest

from loadgen import records as R
from loadgen.backends import registry
from loadgen.backends.base import BackendOptions, ProbeResult, StreamingBackend
from loadgen.backends.identity import ServerIdentity
from loadgen.backends.stream import Live, SSEResponse
from loadgen.backends.transports import TRANSPORTS
from loadgen.backends.transports.base import Transport
from loadgen.cli.main import build_parser
from loadgen.config import ConfigError, load_profile
from loadgen.report.conditions import server_rows
from loadgen.server import fit
from loadgen.testing.fake_transport import FakeResponse, FakeTransport, reads

BUILT_IN = (
    "chat",
    "completions",
    "triton_generate",
    "sglang_generate",
    "responses",
    "messages",
    "triton_grpc",
    "embeddings",
    "rerank",
)
MINIMAL = {"workload.num_requests": 1, "load.concurrency": 1}


def profile_problems(**target: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_profile(None, overrides={**MINIMAL, **{f"target.{k}": v for k, v in target.items()}})
    return info.value.problems


def run_choices(option: str) -> list[str]:
    """The choices of ``loadgen run OPTION``, as the parser is built now."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices["run"]._actions if option in a.option_strings)
    return list(action.choices)


class _EchoStream(SSEResponse):
    """Every event is one token of its own text; the stream ends with the response."""

    __slots__ = ()

    def on_events(self, t: int, events: list[bytes]) -> bool:
        for data in events:
            self.chunk(t, 1, data.decode())
        return True

    def on_end(self) -> None:
        self.rec.ok = True


class EchoBackend(StreamingBackend):
    """A protocol of this test's own, registered only inside ``registry.registered``."""

    __slots__ = ()
    name = "echo_generate"
    description = "a test protocol that echoes"
    PATH = "/echo/{model}/stream"
    STREAM = _EchoStream
    token_ids = True
    server_tokenize = True
    SOURCES = (("version", "/echo/version"), ("echo_info", "/echo/info"))

    def body(self, spec: R.RequestSpec) -> dict[str, Any]:
        return {"input": spec.prompt, "n": spec.output_tokens}

    @classmethod
    async def probe(cls, transport: Transport, url: str, model: str | None) -> ProbeResult:
        info = {"protocol": cls.name, "version": "1.0", "echo_info": {"voices": 2}}
        return ProbeResult(info, model or "echo", ServerIdentity(engine="echo", version="1.0"))


class TestTheRegistry:
    def test_lists_exactly_the_built_in_protocols(self):
        """Importing loadgen.backends registers chat, completions, triton_generate, sglang_generate,
        responses, messages and triton_grpc (which imports without its extra)."""
        assert registry.names() == BUILT_IN
        assert all(registry.backend(n).name == n for n in BUILT_IN)

    def test_profile_endpoint_choices_are_the_registry(self):
        """Every registered name is a valid target.endpoint; a bad one is told the registry's names."""
        for name in registry.names():
            assert load_profile(None, overrides={**MINIMAL, "target.endpoint": name}).target.endpoint == name
        assert profile_problems(endpoint="x") == [
            f"target.endpoint: 'x' is not one of {', '.join(registry.names())}"
        ]

    def test_token_id_endpoints_are_the_registry(self):
        """token_ids is refused on the protocols that do not take them, naming those that do."""
        takes = registry.names(lambda b: b.token_ids)
        assert takes == ("completions", "sglang_generate")
        for name in set(BUILT_IN) - set(takes):
            found = profile_problems(endpoint=name, prompt_format="token_ids")
            assert found == [
                "target.prompt_format: token_ids needs endpoint: completions or "
                f"sglang_generate ({registry.backend(name).text_only})"
            ]

    def test_cli_choices_are_the_registries(self):
        """--endpoint offers the registry's protocols and --transport the transports', in order."""
        assert run_choices("--endpoint") == list(registry.names())
        assert run_choices("--transport") == list(TRANSPORTS)

    def test_fit_tokenize_endpoints_are_the_registry(self):
        """Prompts are fitted with /tokenize for the protocols that say the server can count them."""
        from_registry = registry.names(lambda b: b.server_tokenize)
        assert fit.tokenize_endpoints() == from_registry == ("chat", "completions", "responses", "messages")

    def test_a_taken_name_is_refused(self):
        """A second class for an existing protocol name is an error, not a silent replacement."""

        class Impostor(EchoBackend):
            __slots__ = ()
            name = "chat"

        with pytest.raises(ValueError, match="'chat' is already registered"):
            registry.register(Impostor)
        assert registry.backend("chat").__name__ == "ChatBackend"


class TestAProtocolOfOurOwn:
    def test_registered_it_is_offered_everywhere_then_gone(self):
        """Registered, the test protocol is a valid profile endpoint (token ids too), a CLI
        choice and a /tokenize endpoint; unregistered, none of them any more."""
        with registry.registered(EchoBackend):
            assert registry.names() == (*BUILT_IN, "echo_generate")
            p = load_profile(
                None,
                overrides={
                    **MINIMAL,
                    "target.endpoint": "echo_generate",
                    "target.prompt_format": "token_ids",
                },
            )
            assert (p.target.endpoint, p.target.prompt_format) == ("echo_generate", "token_ids")
            assert "echo_generate" in profile_problems(endpoint="x")[0]
            assert run_choices("--endpoint") == [*BUILT_IN, "echo_generate"]
            assert "echo_generate" in fit.tokenize_endpoints()
        assert registry.names() == BUILT_IN
        assert run_choices("--endpoint") == list(BUILT_IN)
        assert profile_problems(endpoint="echo_generate") == [
            f"target.endpoint: 'echo_generate' is not one of {', '.join(BUILT_IN)}"
        ]

    def test_the_base_class_sends_it(self):
        """Only body, path and consumer were declared: the base class sends the request, fills
        the record and counts its tokens; the path carries the quoted model."""
        fake = FakeTransport(FakeResponse(chunks=reads([b"data: a\n\n", b"data: b\n\ndata: c\n\n"])))
        backend = EchoBackend(BackendOptions(model="my model"), fake, Live())
        spec = R.RequestSpec(7, "hi", None, 2, 3)
        rec = R.RequestRecord(7, False, 0, 0, 3, 2)
        asyncio.run(backend.send(spec, rec))
        assert fake.requests[0].path == "/echo/my%20model/stream"
        assert fake.requests[0].json == {"input": "hi", "n": 3}
        assert (rec.ok, rec.chunk_tokens, rec.output_tokens, rec.prompt_tokens) == (True, [1, 1, 1], 3, 2)

    def test_its_probe_and_report_rows(self):
        """Its probe's result is typed; the report's rows follow its SOURCES, saved with the run,
        and still do once the protocol is no longer registered."""
        from loadgen.runner.prepare import server_conditions

        with registry.registered(EchoBackend):
            backend = registry.backend("echo_generate")
            result = asyncio.run(backend.probe(FakeTransport(), "http://x", None))
            assert result.model == "echo" and result.identity.as_dict()["engine"] == "echo"
            saved = server_conditions(backend, result)
        rows = dict(server_rows(saved, None))
        assert rows["server /echo/version"] == "1.0"
        assert rows["server /echo/info"] == "voices=2"
        assert "server /v1/models" not in rows
