"""Redaction: nothing that could hold a credential reaches a result file, a report or the console.

A leaf: anything may import it, it imports nothing of loadgen. URLs lose their user:password
and secret-looking query values; headers, profile sections and extra_body lose the values of
secret-looking names.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "***"
_SECRET_NAME = re.compile(
    r"(auth|token|secret|key|password|passwd|cookie|session|signature|credential)", re.I
)


def redact_url(url: str | None) -> str | None:
    if not url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = [
            (k, REDACTED if _SECRET_NAME.search(k) else v)
            for k, v in parse_qsl(query, keep_blank_values=True)
        ]
        query = urlencode(pairs, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (REDACTED if _SECRET_NAME.search(k) else v) for k, v in headers.items()}


def redact_profile(resolved: dict[str, Any]) -> dict[str, Any]:
    """The resolved profile as written to results: URL credentials (the target's, the DCGM
    exporters') and secret headers removed."""
    out = dict(resolved)
    target = dict(out.get("target") or {})
    if "url" in target:
        target["url"] = redact_url(target["url"])
    if target.get("urls"):  # several replicas: each may carry its own login
        target["urls"] = [redact_url(u) for u in target["urls"]]
    if target.get("headers"):
        target["headers"] = redact_headers(target["headers"])
    if target.get("extra_body"):
        target["extra_body"] = {
            k: (REDACTED if _SECRET_NAME.search(k) else v) for k, v in target["extra_body"].items()
        }
    out["target"] = target
    telemetry = out.get("telemetry")
    if isinstance(telemetry, dict) and telemetry.get("dcgm"):  # an exporter's URL may carry a login
        out["telemetry"] = {**telemetry, "dcgm": [redact_url(u) for u in telemetry["dcgm"]]}
    return out


# Header names whose values are credentials whatever the profile says (and any name matching
# _SECRET_NAME). Their values are scrubbed from everything loadgen stores.
SECRET_HEADERS = frozenset(
    (
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "cookie",
        "x-auth-token",
        "openai-organization",
        "openai-project",
    )
)
_MIN_SECRET = 4  # shorter values would scrub ordinary words


class Scrubber:
    """Replaces every secret value loadgen sent, wherever a server echoes it back.

    It knows the values themselves (the API key, Basic credentials in both their plain
    ``user:password`` and base64 forms, each value of a secret header, or of a header the
    profile marks secret), not just names: a 401 body or a response header that echoes the
    ``Authorization`` header would otherwise put the key into requests.jsonl, the CSV, the
    summary and the report. Every string loadgen stores passes through ``scrub``.
    """

    def __init__(
        self, headers: Mapping[str, str] = {}, extra: Iterable[str] = (), secret_names: Iterable[str] = ()
    ) -> None:
        marked = {n.lower() for n in secret_names}
        values: set[str] = {v for v in extra if v}
        for name, value in headers.items():
            low = name.lower()
            if low in SECRET_HEADERS or low in marked or _SECRET_NAME.search(low):
                values.update(_forms(value))
        self._values = sorted((v for v in values if len(v) >= _MIN_SECRET), key=len, reverse=True)

    @property
    def active(self) -> bool:
        return bool(self._values)

    def scrub(self, text: str) -> str:
        for v in self._values:
            if v in text:
                text = text.replace(v, REDACTED)
        return text

    def scrub_data(self, data: Any) -> Any:
        """``data`` (JSON-like: dicts, lists, strings) with every string scrubbed, keys too."""
        if not self._values:
            return data
        if isinstance(data, str):
            return self.scrub(data)
        if isinstance(data, dict):
            return {self.scrub(k) if isinstance(k, str) else k: self.scrub_data(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return [self.scrub_data(v) for v in data]
        return data

    def scrub_record(self, rec: Any) -> None:
        """Scrub, in place, the strings of a request record that came from the server: its
        message, its ids and reasons, the tools it called and the answer it gave (a server that
        echoes the key can put it in any of them)."""
        if not self._values:
            return
        for name in ("error_message", "response_id", "finish_reason"):
            if getattr(rec, name):
                setattr(rec, name, self.scrub(getattr(rec, name)))
        for name in ("tool_names", "tool_call_args", "answer"):
            if getattr(rec, name):
                setattr(rec, name, self.scrub_data(getattr(rec, name)))


def _forms(value: str) -> set[str]:
    """A header value and the secret parts inside it: ``Bearer KEY`` -> KEY too; ``Basic B64``
    -> B64 and the decoded ``user:password``, and the password alone."""
    out = {value}
    scheme, _, token = value.partition(" ")
    if token:
        out.add(token.strip())
        if scheme.lower() == "basic":
            try:
                plain = base64.b64decode(token.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                plain = ""
            if plain:
                out.add(plain)
                out.add(plain.partition(":")[2])
    return out


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line with the values of secret-looking options masked: ``--api-key X``,
    ``--api-key=X``, ``HF_TOKEN=X`` (the value, never the name, is what leaks)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _value = arg.partition("=")
        if eq and _secret_option(name):
            out.append(f"{name}={REDACTED}")
        elif arg.startswith("-") and not eq and _secret_option(arg):
            out.append(arg)
            hide_next = True
        else:
            out.append(arg)
    return out


_ARGV_SECRET_WORDS = frozenset(
    [
        "auth",
        "token",
        "secret",
        "key",
        "apikey",
        "password",
        "passwd",
        "cookie",
        "session",
        "signature",
        "credential",
        "credentials",
    ]
)


def _secret_option(name: str) -> bool:
    """An option or variable name with a secret word in it as a whole word (``--api-key``,
    ``HF_TOKEN``), so ``--max-num-batched-tokens 8192`` keeps its value."""
    return any(w in _ARGV_SECRET_WORDS for w in re.split(r"[-_.]+", name.lower().lstrip("-")))
