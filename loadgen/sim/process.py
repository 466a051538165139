"""Running the simulator: blocking in this process (``serve``) or as a child process (``SimProcess``).

The child is ``python -m loadgen.sim serve --config-json ... --port N [--grpc-port M]``. Once
listening it prints one JSON line on stdout, ``{"event": "listening", "url": ..., "port": ...,
"grpc_url": ...}``; the parent reads it (so port 0 works), then polls ``/health``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, NoReturn

import orjson

from loadgen.orphans import die_with_parent

from .config import SimConfig
from .server import SimServer


def serve(
    config: SimConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    ground_truth_path: Path | None = None,
    on_listening: Callable[[SimServer], None] | None = None,
    grpc_port: int | None = None,
) -> None:
    """Run the simulator in this process until SIGINT or SIGTERM; with ``grpc_port`` also
    Triton's gRPC frontend on that port (0: a free one).

    ``on_listening(server)`` is called once the sockets are bound (``server.url``,
    ``server.grpc_url``); by default one line goes to stderr.
    """
    announce = on_listening or (lambda server: print(listening_line(server), file=sys.stderr, flush=True))
    asyncio.run(_serve(config, host, port, ground_truth_path, announce, grpc_port))


def listening_line(server: SimServer) -> str:
    """``loadgen-sim: <preset> serving <model> on <url>[ and <grpc url> (Triton gRPC)]``."""
    config = server.config
    grpc = f" and {server.grpc_url} (Triton gRPC)" if server.grpc_url else ""
    return f"loadgen-sim: {config.preset} serving {config.served_model_name} on {server.url}{grpc}"


async def _serve(config, host, port, ground_truth_path, announce, grpc_port) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
            pass
    async with SimServer(config, host, port, ground_truth_path, grpc_port) as server:
        announce(server)
        await stop.wait()


class SimProcess:
    """The simulator as a subprocess: ``with SimProcess(cfg) as sim: ... sim.url ...``."""

    def __init__(
        self,
        config: SimConfig,
        host: str = "127.0.0.1",
        port: int = 0,
        ground_truth_path: Path | None = None,
        startup_timeout: float = 20.0,
        grpc_port: int | None = None,
    ):
        self.config = config
        self.host, self.port = host, port
        self.grpc_port = grpc_port  # None: HTTP only; else Triton's gRPC frontend too (0: any port)
        self.grpc_url: str | None = None
        self.ground_truth_path = Path(ground_truth_path) if ground_truth_path else None
        self.startup_timeout = startup_timeout
        self.url: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def start(self) -> str:
        cmd = [
            sys.executable,
            "-m",
            "loadgen.sim",
            "serve",
            "--config-json",
            self.config.model_dump_json(),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--announce-json",
        ]
        if self.ground_truth_path:
            cmd += ["--ground-truth", str(self.ground_truth_path)]
        if self.grpc_port is not None:
            cmd += ["--grpc-port", str(self.grpc_port)]
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])  # importable even when not installed
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._stderr, env=env, preexec_fn=die_with_parent
        )
        said = orjson.loads(self._read_announcement())
        url: str = said["url"]
        self.url, self.grpc_url = url, said.get("grpc_url")
        self.port = int(url.rsplit(":", 1)[1])
        self._wait_healthy(url)
        return url

    def _read_announcement(self) -> bytes:
        box: list[bytes] = []
        assert self._proc is not None and self._proc.stdout is not None  # start(): stdout=PIPE
        stdout = self._proc.stdout
        reader = threading.Thread(target=lambda: box.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        if not box or not box[0].strip():
            self._fail("did not report its address")
        return box[0]

    def _wait_healthy(self, url: str) -> None:
        assert self._proc is not None  # started by start()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._fail("exited")
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self._fail("did not answer /health")

    def _fail(self, what: str) -> NoReturn:
        self.stop(timeout=2)
        assert self._stderr is not None  # opened by start() before the child
        self._stderr.seek(0)
        err = self._stderr.read().decode(errors="replace").strip()
        raise RuntimeError(
            f"loadgen simulator {what} within {self.startup_timeout:.0f} s; its stderr:\n{err or '(empty)'}"
        )

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (the child flushes its ground-truth log and exits), SIGKILL after ``timeout``."""
        p = self._proc
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stdout:
            p.stdout.close()

    def __enter__(self) -> SimProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
