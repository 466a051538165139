"""Redaction: nothing that could hold a credential reaches a result file, a report or the console.

A leaf: anything may import it, it imports nothing of loadgen. URLs lose their user:password
and secret-looking query values; headers, profile sections and extra_body lose the values of
secret-looking names.
"""

from __future__ import annotations

import re
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "***"
_SECRET_NAME = re.compile(r"(auth|token|secret|key|password|passwd|cookie|session|signature|credential)", re.I)
def redact_url(url: str | None) -> str | None:
    if not url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = [(k, REDACTED if _SECRET_NAME.search(k) else v)
                 for k, v in parse_qsl(query, keep_blank_values=True)]
        query = urlencode(pairs, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (REDACTED if _SECRET_NAME.search(k) else v) for k, v in headers.items()}


def redact_profile(resolved: dict) -> dict:
    """The resolved profile as written to results: URL credentials and secret headers removed."""
    out = dict(resolved)
    target = dict(out.get("target") or {})
    if "url" in target:
        target["url"] = redact_url(target["url"])
    if target.get("headers"):
        target["headers"] = redact_headers(target["headers"])
    if target.get("extra_body"):
        target["extra_body"] = {k: (REDACTED if _SECRET_NAME.search(k) else v)
                                for k, v in target["extra_body"].items()}
    out["target"] = target
    return out
