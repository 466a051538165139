"""Fixtures: the simulator on a background thread, over real loopback sockets."""

from __future__ import annotations

import httpx
import pytest

from loadgen.sim import SimConfig

from .helpers import ThreadedSim


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """llama3-8b-fp16@h100 at 20x wall speed, logging ground truth."""
    path = tmp_path_factory.mktemp("sim") / "ground_truth.jsonl"
    s = ThreadedSim(SimConfig(time_scale=0.05, seed=7), path)
    yield s
    s.close()


@pytest.fixture
def client(sim):
    with httpx.Client(base_url=sim.url, timeout=10) as c:
        yield c
