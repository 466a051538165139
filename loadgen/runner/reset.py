"""The server's reset hooks: each ``target.reset_path`` hook (``POST /path`` or ``GET /path``),
in turn, before the load (and before each repeat, and before each cell of an experiment), so a
run does not inherit the previous one's warm prefix cache.

vLLM serves ``POST /reset_prefix_cache``, SGLang ``POST /flush_cache`` (the built-in simulator
both). A hook carries the run's headers, credentials included (a server behind an API key wants
them, in the header its protocol sends them in), on a connection of its own that is closed
before the load opens its pool. A reset that fails stops the run before any load is sent: a
benchmark that meant to start cold and did not would be measured warm without saying so. Its
error names the hook and the status, never a header's value (it passes the run's scrubber).
"""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.backends.transports import make_transport
from loadgen.backends.transports.base import Transport
from loadgen.config.target import reset_hook
from loadgen.errors import RunError
from loadgen.runner.prepare import Target

_BODY_SHOWN = 200  # characters of a failing answer's body kept in the error
_GET_TIMEOUT_S = 30.0


class _Answer:
    """The status and the first bytes of a reset's answer (a transport ``Consumer``)."""

    def __init__(self) -> None:
        self.status = 0
        self.body = b""

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        self.status = status

    def feed(self, t_ns: int, data: bytes) -> bool:
        self.body += data[: _BODY_SHOWN - len(self.body)]
        return True

    def resent(self, t_ns: int, reason: str) -> None:
        pass


async def reset_server(transport_name: str, target: Target, hooks: tuple[str, ...]) -> None:
    """Each hook, in turn, with the run's headers, on every replica (target.urls); ``RunError``
    unless every one answers 2xx."""
    for opts in target.replicas or (target.opts,):
        transport = make_transport(transport_name, opts)
        try:
            for hook in hooks:
                await _one(transport, target, hook)
        finally:
            await transport.aclose()


async def _one(transport: Transport, target: Target, hook: str) -> None:
    method, path = reset_hook(hook)
    answer = _Answer()
    try:
        if method == "GET":
            answer.status, _, body = await transport.get(path, timeout_s=_GET_TIMEOUT_S)
            answer.body = body[:_BODY_SHOWN]
        else:
            await transport.post_stream(path, b"", answer)
    except Exception as exc:  # noqa: BLE001 - every transport's errors, classified by it
        error_class, message = transport.classify(exc)
        raise RunError(
            target.scrubber.scrub(
                f"the reset hook {method} {path} (target.reset_path, --reset-path) failed: {error_class}: "
                f"{message}; check the path, or drop the hook"
            )
        ) from None
    if not 200 <= answer.status < 300:
        said = answer.body.decode("utf-8", "replace").strip()
        raise RunError(
            target.scrubber.scrub(
                f"the reset hook {method} {path} (target.reset_path, --reset-path) answered HTTP "
                f"{answer.status}" + (f" ({said})" if said else "") + "; vLLM serves /reset_prefix_cache "
                "(with VLLM_SERVER_DEV_MODE=1), SGLang /flush_cache: check the path, or drop the hook"
            )
        )
