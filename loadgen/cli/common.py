"""What every command of the CLI shares: the exit codes, the one-line error, the profile a
command names, its ``--label`` flags and the open-file limit a load needs.

Part of the CLI layer: it prints and exits; the library does not.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_OK, EXIT_SLA_FAIL, EXIT_BAD_INPUT, EXIT_NOTHING_SERVED = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141

# What each exit code means, the one list (the documentation's reference page renders it).
EXIT_CODES = {
    EXIT_OK: "done: the run finished and every rule held (or the command had no rules to check)",
    EXIT_SLA_FAIL: "a verdict failed: an SLA rule (`--fail-on-sla`), a gate's rule, a capacity search "
    "that found no rate meeting the SLA, an experiment with a failed cell",
    EXIT_BAD_INPUT: "bad input, caught before any load: a profile or flag that does not validate, an "
    "unreachable server, a missing file; the one error line names the field and the fix",
    EXIT_NOTHING_SERVED: "nothing was served: the run (every stage of a sweep, every stage of a capacity "
    "search) finished with no ok request, whatever `--fail-on-sla` says; the last line gives the error "
    "classes and the server's own message",
    EXIT_INTERRUPTED: "stopped by Ctrl-C or SIGTERM; every finished record is kept and summarised (stopped "
    "while the server was still being probed or preflighted, before any load: nothing was measured)",
    EXIT_BROKEN_PIPE: "the reader of loadgen's output left early (`loadgen ... | head`)",
}


def die(msg: str) -> int:
    """Print ``msg`` as the CLI's one error line and return the bad-input exit code."""
    print(f"loadgen: error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def resolve_profile_path(arg: str | None) -> Path | None:
    """The profile file a command names: a path, or a shipped profile's name."""
    from loadgen.config import shipped

    return None if arg is None else shipped.resolve_profile(arg)


def labels(raw: Sequence[str]) -> list[str]:
    """``--label KEY=VALUE`` flags as ``--set labels.KEY=VALUE`` items (exit 2 on a bad one)."""
    out = []
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(die(f"--label {item!r}: expected KEY=VALUE, e.g. --label gpu=H200"))
        out.append(f"labels.{key}={value}")
    return out


def raise_fd_limit() -> None:
    """Lift the soft open-file limit to the hard one before a load starts."""
    # An uncapped open loop holds one socket per request in flight; the default soft limit
    # (often 1024) would turn a load spike into connect errors that are the client's fault.
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
