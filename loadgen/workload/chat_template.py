"""A model's chat template, so chat prompts are fitted to the length the server will count.

An OpenAI-compatible server does not tokenize a chat request's text alone: it renders the
messages through the model's chat template (the roles' headers, the turn separators, a BOS
token, the assistant's opening) and counts that, so ``usage.prompt_tokens`` is the requested
length plus the template's tokens (16 on a Llama 3 model's one-message request). When the
tokenizer folder ships the template (``chat_template.jinja``, or ``chat_template`` in
``tokenizer_config.json``, as Hugging Face saves them), chat prompts are fitted through it: the
user's text is grown or cut until the rendered prompt is the requested length.

Rendered as ``transformers``' ``apply_chat_template`` renders it (which loadgen does not depend
on): Jinja2 in a sandbox, ``trim_blocks`` and ``lstrip_blocks``, the loop controls,
``raise_exception``, ``strftime_now`` and its ``tojson``, the special tokens by name, and
``add_generation_prompt`` on (what vLLM, SGLang and ``transformers serve`` do for a chat
request); counted without adding special tokens (the template writes its own BOS, and those
servers tokenize the rendered text without adding another).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.workload.prompts import MissingExtra, TokenizerPrompts, chat_messages

__all__ = ["ChatTemplate", "ChatTemplateError", "TemplateFit", "find_chat_template"]

_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ChatTemplateError(LoadgenError, ValueError):
    """A chat template that cannot be read or cannot render the run's messages."""


def find_chat_template(path: str | Path) -> tuple[str, dict[str, str]] | None:
    """The chat template beside the tokenizer ``path`` names (a ``tokenizer.json`` or its
    folder), and the special tokens it may name (``bos_token``...); None when there is none.
    ``chat_template.jinja`` first, then ``chat_template.json``, then ``tokenizer_config.json``'s
    ``chat_template`` (a string, or a list of named templates: the ``default`` one)."""
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    config = _read_json(folder / "tokenizer_config.json")
    special = {k: v for k in _SPECIAL if (v := _token_text(config.get(k))) is not None}
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8"), special
    source = _read_json(folder / "chat_template.json").get("chat_template") or config.get("chat_template")
    if isinstance(source, list):  # [{name, template}, ...]: the default one
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    return (source, special) if isinstance(source, str) and source.strip() else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ChatTemplateError(f"{path}: cannot be read as JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


def _token_text(v: object) -> str | None:
    """A special token as tokenizer_config.json saves it: a string, or an AddedToken's dict."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return str(v["content"])
    return None


class ChatTemplate:
    """A compiled chat template: ``render(messages)`` is the text the server tokenizes."""

    def __init__(self, source: str, special: Mapping[str, str], where: str = "the chat template") -> None:
        try:
            import jinja2
            from jinja2 import ext, nodes
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            raise MissingExtra(
                f"{where}: fitting chat prompts through it needs the 'jinja2' package: "
                "pip install 'loadgen[tokenizer]' (or set workload.prompt.chat_template: never)"
            ) from None

        class Generation(ext.Extension):
            """``{% generation %}…{% endgeneration %}`` (assistant masks): the body, as is."""

            tags = {"generation"}  # noqa: RUF012 - jinja2's own class attribute

            def parse(self, parser: Any) -> list[nodes.Node]:
                next(parser.stream)
                body: list[nodes.Node] = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                return body

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, **kw: Any) -> str:
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, **kw)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[Generation, ext.loopcontrols]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: dt.datetime.now().strftime(fmt)
        self._errors: tuple[type[Exception], ...] = (jinja2.TemplateError,)
        self.where = where
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"{where} does not compile: {exc}") from None
        self._special = dict(special)

    @classmethod
    def beside(cls, path: str | Path) -> ChatTemplate | None:
        """The template beside the tokenizer ``path`` names, compiled; None without one."""
        found = find_chat_template(path)
        if found is None:
            return None
        folder = Path(path) if Path(path).is_dir() else Path(path).parent
        return cls(found[0], found[1], where=f"the chat template in {folder}")

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None) -> str:
        """The prompt text of ``messages`` (and ``tools``), the assistant's turn opened."""
        try:
            return str(
                self._template.render(
                    messages=list(messages),
                    tools=list(tools) if tools else None,
                    documents=None,
                    add_generation_prompt=True,
                    **self._special,
                )
            )
        except self._errors as exc:
            raise ChatTemplateError(
                f"{self.where} cannot render this run's messages: {exc} "
                "(set workload.prompt.chat_template: never to fit the text alone)"
            ) from None


class TemplateFit:
    """Chat prompts fitted through a template: request ``i``'s user text (the workload's own,
    unique from its first words) grown or cut until the rendered prompt, its system message and
    tools included, counts ``n`` tokens; when it cannot (the template alone is longer than
    ``n``, or a cut never lands), the count it realised, never a claim of ``n``."""

    _ROUNDS = 8

    def __init__(self, prompts: TokenizerPrompts, template: ChatTemplate) -> None:
        self.prompts, self.template = prompts, template
        # What the template (and the system message) adds over the user's text, by shape: the
        # first guess of the next fit, so most requests are fitted in one round.
        self._extra: dict[tuple[str | None, bool], int] = {}

    def count(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None) -> int:
        """Tokens of ``messages`` as the server counts them: rendered, then encoded."""
        return self.prompts.count(self.template.render(messages, tools))

    def build(
        self, i: int, n: int, system: str | None, tools: Sequence[Any] | None = None
    ) -> tuple[str, int]:
        """(the user's text, the rendered prompt's tokens) of request ``i``."""
        key = (system, bool(tools))
        extra = self._extra.get(key)
        if extra is None:
            extra = self.count(chat_messages("", system), tools)
        n_user = max(1, n - extra)
        best: tuple[str, int] | None = None
        for _ in range(self._ROUNDS):
            user, got_user = self.prompts.build(i, n_user)
            total = self.count(chat_messages(user, system), tools)
            if best is None or abs(total - n) < abs(best[1] - n):
                best = (user, total)
            self._extra[key] = total - got_user
            if total == n or (n_user == 1 and total > n):
                break
            n_user = max(1, n_user + n - total)
        assert best is not None  # at least one round ran
        return best
