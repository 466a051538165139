"""A SimServer on a background thread with its own event loop, for tests over real loopback."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import orjson

from loadgen.sim import SimConfig, SimServer


class ThreadedSim:
    """A SimServer running in a daemon thread; ``.url``, ``.ground_truth_path``, ``.close()``."""

    def __init__(self, config: SimConfig, ground_truth_path: Path | None = None):
        self.loop = asyncio.new_event_loop()
        self.server = SimServer(config, ground_truth_path=ground_truth_path)
        self.ground_truth_path = ground_truth_path
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def ground_truth(self) -> list[dict]:
        return [orjson.loads(line) for line in self.ground_truth_path.read_bytes().splitlines()]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
