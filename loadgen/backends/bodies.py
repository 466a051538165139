"""Request bodies the user writes instead of the adapter: a Jinja2 template, or recorded bodies.

Why: a server that is almost OpenAI (a gateway's extra envelope, a vendor's field names) would
otherwise need a new adapter for its request alone. Only the body changes: the endpoint's
adapter still sends it to its path and reads the answer, so every metric means what it means
for that protocol. The template is sandboxed (``ImmutableSandboxedEnvironment``: a profile
someone sent you cannot reach Python), and undefined names are errors (``StrictUndefined``),
so a typo never sends an empty field.

``VARIABLES`` is the one list of what a template sees; ``check`` renders a body against a spec
once, before any request goes out, so a template that does not compile, names an unknown
variable or does not render JSON fails the profile with its line, never a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from loadgen import records as R
from loadgen.errors import LoadgenError

# What a template sees, and what each holds (docs/guides/real-servers.md lists them from here).
VARIABLES: dict[str, str] = {
    "id": "the request's index in the run (warm-up requests first)",
    "model": "the model it asks for (a LoRA mix's pick, else target.model or the server's first)",
    "prompt": "the user text, or the token-id list when prompt_format is token_ids",
    "token_ids": "the prompt's token ids (prompt_format: token_ids), else none",
    "messages": "the chat messages the chat adapter would send (history included), else none",
    "input_tokens": "the prompt's length in tokens, as the workload built it",
    "output_tokens": "the output length the request asks for",
    "max_tokens": "the same as output_tokens, under the name most servers use",
    "session": "{id, turn, messages}: a multi-turn request's conversation, its turn (from 1) and "
    "its messages so far; every value none outside a session",
}


class BodyError(LoadgenError, ValueError):
    """A custom body that cannot be used: the template does not compile or render, renders
    something that is not JSON, or a recorded body file cannot be read."""


def variables(spec: R.RequestSpec, model: str) -> dict[str, Any]:
    """The values of ``VARIABLES`` for ``spec``'s request."""
    ids = spec.prompt if isinstance(spec.prompt, list) else None
    session = {"id": spec.session_id, "turn": spec.turn, "messages": spec.messages}
    if spec.session_id is None:
        session["messages"] = None
    return {
        "id": spec.id,
        "model": spec.model or model,
        "prompt": spec.prompt,
        "token_ids": ids,
        "messages": spec.messages,
        "input_tokens": spec.prompt_tokens,
        "output_tokens": spec.output_tokens,
        "max_tokens": spec.output_tokens,
        "session": session,
    }


def _tojson(value: Any) -> str:
    # Compact JSON for a request body: Jinja's own tojson escapes <, >, & and ' for HTML.
    return orjson.dumps(value).decode()


class BodyTemplate:
    """A compiled body template: ``render(spec, model)`` is the bytes the request sends."""

    __slots__ = ("_template", "name")

    def __init__(self, source: str, name: str) -> None:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.name = name
        env = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise BodyError(
                f"{name}, line {exc.lineno}: the template does not compile ({exc.message}); "
                "fix its Jinja2 syntax"
            ) from None

    def render(self, spec: R.RequestSpec, model: str) -> bytes:
        """The body of ``spec``'s request; BodyError naming the line when it does not render."""
        import jinja2

        try:
            return self._template.render(variables(spec, model)).encode()
        except jinja2.TemplateError as exc:
            line = _line_of(exc)
            at = f", line {line}" if line else ""
            known = ", ".join(VARIABLES)
            raise BodyError(
                f"{self.name}{at}: the template does not render ({exc}); it may use {known}"
            ) from None


def _line_of(exc: BaseException) -> int | None:
    """The template line a render error came from: its traceback's frame in ``<template>``."""
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno  # jinja2 rewrites these frames to the template's own lines
        tb = tb.tb_next
    return line


class RecordedBodies:
    """Recorded request bodies replayed as they are: request ``i`` sends line ``i`` modulo
    their number (a run longer than the file cycles through it, as a dataset does)."""

    __slots__ = ("bodies", "name")

    def __init__(self, path: str) -> None:
        self.name = path
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise BodyError(f"{path}: cannot read the recorded bodies ({exc.strerror or exc})") from None
        self.bodies: list[bytes] = []
        for k, line in enumerate(raw.split(b"\n"), 1):
            line = line.rstrip(b"\r")
            if not line.strip():
                continue
            _json(line, f"{path}, line {k}", "write one JSON request body a line")
            self.bodies.append(line)
        if not self.bodies:
            raise BodyError(f"{path}: holds no request body; write one JSON body a line")

    def render(self, spec: R.RequestSpec, model: str) -> bytes:
        return self.bodies[max(spec.id, 0) % len(self.bodies)]


def _json(body: bytes, where: str, fix: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BodyError(f"{where}: not JSON ({exc}); {fix}") from None


def check(body: bytes, where: str, streamed_flag: bool) -> None:
    """Refuse ``body`` when it is not JSON, or lacks ``"stream": true`` where the endpoint's own
    adapter sends it (its answer would then come whole, and TTFT would be the whole answer)."""
    obj = _json(body, where, "the template must render one JSON value (use |tojson for values)")
    if streamed_flag and not (isinstance(obj, dict) and obj.get("stream") is True):
        raise BodyError(
            f'{where}: the body has no "stream": true, which this endpoint streams by; '
            'add "stream": true to it'
        )
