"""The saved self-check: how much load this machine drives truthfully, and the run-time lookup.

``loadgen selfcheck`` (``runner.selfcheck``) measures a ceiling per number of workers and saves
it here with the machine's identity; ``loadgen run`` against a real server looks it up before it
starts, so that a load above what this client can measure without distorting it is said at
once (and written into the summary's client block), not discovered from a ``client_limited``
flag afterwards. A check is only reused on the machine and configuration it was made on: the
CPU model, usable cores, Python and loadgen version, the transport and the loop kind (closed:
concurrency, open: rate). The file is JSON under ``$LOADGEN_CACHE_DIR``, else
``$XDG_CACHE_HOME/loadgen``, else ``~/.cache/loadgen``. Imports the standard library and
``runner.fleet`` (usable cores) only.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from loadgen.runner.fleet import usable_cores
from loadgen.summary import ClientSelfcheck

FILE = "selfcheck.json"


def cache_path() -> Path:
    """Where the self-check is saved (the directory is created when saving)."""
    explicit = os.environ.get("LOADGEN_CACHE_DIR")
    if explicit:
        return Path(explicit) / FILE
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loadgen" / FILE


def machine() -> dict[str, Any]:
    """What makes two self-checks comparable: the same CPU, cores, Python and loadgen."""
    from loadgen.version import __version__

    return {
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": usable_cores(),
        "python": sys.version.split()[0],
        "loadgen_version": __version__,
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def config_key(transport: str, mode: str) -> str:
    """The configuration a ceiling holds for: the transport and the loop kind."""
    return f"{transport}/{mode}"


def save(entry: dict[str, Any], path: Path | None = None) -> Path:
    """Add ``entry`` (``runner.selfcheck``'s result, with ``machine`` and ``key``) to the file,
    replacing an earlier check of the same machine and configuration; returns the path."""
    path = path or cache_path()
    entries = [
        e
        for e in _entries(path)
        if not (e.get("machine") == entry["machine"] and e.get("key") == entry["key"])
    ]
    entries.append({**entry, "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"entries": entries}, indent=2) + "\n")
    tmp.replace(path)
    return path


def _entries(path: Path) -> list[dict[str, Any]]:
    """The saved checks; a missing or unreadable file has none (it is a cache, never an error)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    entries = data.get("entries") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def lookup(transport: str, mode: str, workers: int, path: Path | None = None) -> dict[str, Any] | None:
    """The saved ceiling for this machine, configuration and number of workers, or None:
    ``{"ceiling", "unit", "tokens_per_s", "first_token_lag_p99_ms", "saved_at", "pace",
    "threshold_ms", "path"}``."""
    path = path or cache_path()
    me, key = machine(), config_key(transport, mode)
    for entry in reversed(_entries(path)):
        if entry.get("machine") != me or entry.get("key") != key:
            continue
        for result in entry.get("results") or []:
            if result.get("workers") == workers:
                return {
                    "ceiling": result.get("ceiling"),
                    "unit": entry.get("unit"),
                    "tokens_per_s": result.get("tokens_per_s"),
                    "first_token_lag_p99_ms": result.get("first_token_lag_p99_ms"),
                    "threshold_ms": entry.get("threshold_ms"),
                    "pace": entry.get("pace"),
                    "saved_at": entry.get("saved_at"),
                    "path": str(path),
                }
    return None


def judge(requested: float, workers: int, saved: dict[str, Any] | None) -> ClientSelfcheck | None:
    """The summary's ``client.selfcheck`` block for a run asking for ``requested`` (concurrency
    or req/s) on ``workers`` workers: the saved ceiling beside it and whether it is above."""
    if saved is None:
        return None
    ceiling = saved["ceiling"]
    above = ceiling is None or requested > ceiling
    unit = saved["unit"]
    block = cast(
        ClientSelfcheck, {**saved, "requested": requested, "workers": workers, "above_ceiling": above}
    )
    if above:
        limit = "no load at all" if ceiling is None else f"{ceiling:g} {unit}"
        block["message"] = (
            f"the requested load ({requested:g} {unit} on {workers} worker(s)) is above what this "
            f"machine drove truthfully in its self-check ({limit}, first-token lag p99 <= "
            f"{saved['threshold_ms']:g} ms, {saved['saved_at']}): client delay may inflate the "
            "latencies; use more workers (--workers) or see `loadgen selfcheck`"
        )
    return block
