"""A ``serve:`` backend's server for one cell: started, made ready, watched, stopped.

    with Server(argv, log_path, env=..., ready="/v1/models", ready_timeout_s=300) as srv:
        srv.url, srv.version ...           # ready; the cell runs
    # stopped: SIGTERM to its process group, SIGKILL after the grace period

The command runs without a shell (``shlex.split``; write ``sh -c '...'`` for pipes), in a
process group of its own, stdout and stderr in ``log_path``. Nothing is left running: loadgen
stops the group after the cell; a reaper process (``reaper.py``) stops it if loadgen dies
first, ``kill -9`` included; and the server itself gets Linux's parent-death signal.

A server that exits before it is ready, or is not ready in time, raises ``ServerError`` with
the last lines of its log: the experiment fails that cell and goes on with the next.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx

from loadgen.errors import LoadgenError
from loadgen.orphans import die_with_parent
from loadgen.redact import redact_argv

__all__ = ["Server", "ServerError", "free_port", "log_tail", "secret_values"]

TAIL_LINES = 20
POLL_S = 0.25


class ServerError(LoadgenError):
    """The server did not start, was not ready in time, or died: the message names the command
    and ends with the last lines of its log."""

    def __init__(self, what: str, server: Server | None = None) -> None:
        super().__init__(what)
        self.what, self.server = what, server

    def __str__(self) -> str:
        # Read when shown: the log has then been moved into the cell's run folder.
        return self.what if self.server is None else _message(self.what, self.server)


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick), for ``{port}``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def secret_values(argv: list[str]) -> list[str]:
    """The values ``redact_argv`` masks in a command line (``--api-key X``, ``HF_TOKEN=X``):
    what a server may print back into its log."""
    out = []
    for raw, shown in zip(argv, redact_argv(argv)):
        if raw != shown:
            out.append(raw.partition("=")[2] if "=" in shown else raw)
    return [v for v in out if v]


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, or a note that it is empty."""
    try:
        text = path.read_bytes()[-64_000:].decode(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.rstrip().splitlines()[-lines:]
    return "\n".join(tail) if tail else "(the log is empty)"


class Server:
    """One server process group (see the module's docstring)."""

    def __init__(
        self,
        command: str,
        log_path: Path,
        *,
        url: str,
        env: dict[str, str] | None = None,
        ready: str = "/v1/models",
        ready_timeout_s: float = 300.0,
        stop_grace_s: float = 10.0,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self.argv = shlex.split(command)
        self.command = " ".join(redact_argv(self.argv))  # what conditions and logs may show
        self.log_path, self.url, self.env = log_path, url, env or {}
        self.ready, self.ready_timeout_s, self.stop_grace_s = ready, ready_timeout_s, stop_grace_s
        self.cancelled = cancelled  # polled while waiting for readiness (Ctrl-C during a start)
        self.version: str | None = None
        self.died: int | None = None  # its exit code, when it exited during the cell
        self.proc: subprocess.Popen[bytes] | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        if not self.argv:
            raise ServerError("serve: the command is empty")
        self._log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except OSError as exc:
            self._log.close()
            raise ServerError(f"serve: cannot start {self.argv[0]!r}: {exc.strerror or exc}") from None
        self._reaper = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("reaper.py")),
                str(self.proc.pid),
                str(self.stop_grace_s),
            ],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
        self._wait_ready()
        self.version = self._version()

    def _wait_ready(self) -> None:
        assert self.proc is not None  # start() made it
        deadline = time.monotonic() + self.ready_timeout_s
        url = self.url + self.ready
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerError(f"the server exited with code {code} before it was ready", self)
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.cancelled():
                raise ServerError("stopped before the server was ready", self)
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"the server was not ready ({self.ready} answering 200) "
                    f"within {self.ready_timeout_s:g} s",
                    self,
                )
            time.sleep(POLL_S)

    def _version(self) -> str | None:
        """What the server says it is: vLLM's /version, else None (the run records its identity)."""
        with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
            r = httpx.get(self.url + "/version", timeout=2.0)
            if r.status_code == 200:
                v = r.json().get("version")
                return None if v is None else str(v)
        return None

    def exit_code(self) -> int | None:
        """None while it runs, else its exit status."""
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL after the grace period; the reaper then exits."""
        p = self.proc
        if p is not None:
            _signal_group(p.pid, signal.SIGTERM)
            try:
                p.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(p.pid, signal.SIGKILL)  # the leader's children too, if any linger
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5.0)
        if self._reaper is not None:
            assert self._reaper.stdin is not None  # stdin=PIPE
            self._reaper.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(5.0)
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> Server:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _message(what: str, server: Server) -> str:
    return f"{what}: {server.command}\nlast lines of {server.log_path}:\n{log_tail(server.log_path)}"
