"""How the pool reaches one worker, wherever it runs: the ``Channel`` seam (send a frame, read
the worker's frames, say why they ended, close), and ``ProcessChannel``, a worker in a child
process of this one over two pipes (a Ray actor is ``runner/cluster``'s ``RayChannel``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from typing import Protocol

from loadgen.runner import frames


class Channel(Protocol):
    """One worker, wherever it runs."""

    label: str  # e.g. "pid 4242" or "ray node 10.0.0.7"

    def send(self, data: bytes) -> None: ...

    def frames(self) -> AsyncIterator[tuple[int, bytes]]:
        """The worker's frames; ends when it is gone."""
        ...

    async def lost_reason(self) -> str:
        """Why the stream ended (after ``frames`` ended)."""
        ...

    async def close(self) -> None: ...


class ProcessChannel:
    """A worker in a child process of this one (``python -m loadgen.runner.worker``)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self.label = f"pid {proc.pid}"
        self.pid = proc.pid
        self._tail = bytearray()
        self._err_task = asyncio.create_task(self._drain_stderr())

    @classmethod
    async def spawn(cls) -> ProcessChannel:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            # Not ``-m``: the worker's classes must pickle under their module's own name.
            "from loadgen.runner.worker import main; main()",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 24,
        )
        return cls(proc)

    async def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(4096):
            self._tail = (self._tail + chunk)[-2000:]

    def send(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        if not self._proc.stdin.is_closing():
            self._proc.stdin.write(data)

    async def frames(self) -> AsyncIterator[tuple[int, bytes]]:
        assert self._proc.stdout is not None
        while (got := await frames.read_frame(self._proc.stdout)) is not None:
            yield got

    async def lost_reason(self) -> str:
        try:
            code = await asyncio.wait_for(self._proc.wait(), 5.0)
        except asyncio.TimeoutError:  # on Python 3.10 wait_for raises this, not TimeoutError
            return "its output ended but the process still runs"
        await asyncio.gather(self._err_task, return_exceptions=True)
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        tail = self._tail.decode(errors="replace").strip().splitlines()
        return f"exited with code {code}" + (f": {tail[-1][:300]}" if tail else "")

    async def close(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.send(frames.frame(frames.QUIT))
        try:
            await asyncio.wait_for(self._proc.wait(), 10.0)
        except asyncio.TimeoutError:  # on Python 3.10 wait_for raises this, not TimeoutError
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        await asyncio.gather(self._err_task, return_exceptions=True)
