"""Conditions of a run: who was measured, with what, on what; and redaction of secrets.

A number without its conditions is meaningless (the seed chapter's rule), so every result
carries these. Anything that could hold a credential passes through ``redact_*`` first.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "***"
_SECRET_NAME = re.compile(r"(auth|token|secret|key|password|passwd|cookie|session|signature|credential)", re.I)
_LIBRARIES = ("httpx", "httpcore", "h11", "aiohttp", "numpy", "pandas", "orjson", "pydantic",
              "pyyaml", "rich", "uvloop", "tokenizers", "matplotlib")
# Response headers worth keeping: they name the engine, its version or the proxy in front.
_SERVER_HEADERS = re.compile(r"^(server|via|x-.*(version|engine|backend|model|served|server).*|openai-.*)$", re.I)


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


def server_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if _SERVER_HEADERS.match(k)}


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the loadgen checkout, when it runs from one (editable installs)."""
    where = path or Path(__file__).resolve().parent.parent
    if not (where / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def client_info(transport: str, event_loop: str) -> dict:
    from loadgen import __version__

    return {
        "loadgen_version": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "transport": transport,
        "event_loop": event_loop,
        "libraries": library_versions(),
    }


def host_info() -> dict:
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
