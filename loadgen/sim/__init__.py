"""The built-in GPU-serving simulator: the seed chapter's physics behind an OpenAI-compatible server.

It is the system under test, so it imports nothing from the rest of loadgen.

    from loadgen.sim import SimConfig, SimProcess
    with SimProcess(SimConfig.from_dict({"preset": "llama3-8b-fp16@h100"})) as sim:
        ...  # point any OpenAI client at sim.url

See docs/simulator.md for the model, the defaults and a worked example.
"""

from .config import SimConfig, SimConfigError
from .engine import Engine, Seq, Step
from .physics import Physics, kv_bytes_per_token, max_concurrent_requests
from .presets import GPUS, MODELS, GpuSpec, ModelSpec, parse_preset
from .process import SimProcess, serve
from .server import SimServer
from .virtual_time import simulate

__all__ = [
    "GPUS",
    "MODELS",
    "Engine",
    "GpuSpec",
    "ModelSpec",
    "Physics",
    "Seq",
    "SimConfig",
    "SimConfigError",
    "SimProcess",
    "SimServer",
    "Step",
    "kv_bytes_per_token",
    "max_concurrent_requests",
    "parse_preset",
    "serve",
    "simulate",
]
