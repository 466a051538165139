"""The simulated GPU an exporter can read: utilisation, memory, power and an energy counter,
computed from the engine's steps, served as NVIDIA's DCGM exporter serves a real one.

Why the simulator has one: energy per token is a ratio of two counters read by two different
scrapers (the GPU's energy, the server's tokens), and the only way to check that loadgen
divides the right windows is a GPU whose true energy is known. Here it is known exactly.

The model, per GPU of the tensor-parallel group (each does 1/tp of every step in the same time):

- **power** during a step = idle + (board - idle) x min(1, compute_s / d + ``MEMORY_BOUND_SHARE``
  x memory_s / d), with d the step's duration and compute_s, memory_s the roofline's two times
  (``Physics.step_times``). A compute-bound step (a long prefill) draws the board power; a step
  that only streams weights from HBM draws ``MEMORY_BOUND_SHARE`` of the dynamic range (its SMs
  mostly wait); the fixed per-step overhead (launches, scheduling) draws idle power. A draft
  model's passes add their own two times to compute_s and memory_s; a tensor-parallel
  all-reduce counts as memory time (the SMs reduce what the links bring, as a bandwidth-bound
  kernel does). Between steps the GPU draws idle power.
- **energy** (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, mJ) integrates that power over the
  engine's time exactly: a step adds power x its virtual duration, spread over the wall-clock
  span the server paces it to (so a scrape mid-step reads its share); idle time adds idle power
  x (wall time / time_scale). Wall time the pacing loop lost (the CPU was the bottleneck) counts
  as idle. Unpaced (time_scale 0) a step's energy is added whole and idle time adds nothing.
- **utilisation** (``DCGM_FI_DEV_GPU_UTIL``, %) is the share of the last engine second
  (``UTIL_WINDOW_S`` x time_scale of wall time) that a step was running.
- **memory used** (``DCGM_FI_DEV_FB_USED``, MiB) is the weights plus the KV blocks in use. A real
  vLLM allocates its whole KV cache at start-up, so its FB_USED stays flat; the simulator
  reports what the blocks hold, so memory follows the load.

Imports nothing of the client (the simulator is the system under test).
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Any

from .engine import Engine, Step
from .presets import GpuSpec

MEMORY_BOUND_SHARE = 0.6
UTIL_WINDOW_S = 1.0
MIB = 2**20
PATH = "/dcgm/metrics"
HOSTNAME = "loadgen-sim"

# (DCGM field, Prometheus type, help) as dcgm-exporter's etc/default-counters.csv words them.
FIELDS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
)


def step_watts(gpu: GpuSpec, step: Step) -> float:
    """One GPU's power while ``step`` runs (see the module's docstring)."""
    d = step.duration_ns / 1e9
    if d <= 0:
        return gpu.idle_watts
    compute = step.compute_s + step.draft_compute_s
    memory = step.memory_s + step.draft_memory_s + step.comm_s
    busy = min(1.0, compute / d + MEMORY_BOUND_SHARE * memory / d)
    return gpu.idle_watts + (gpu.board_watts - gpu.idle_watts) * busy


class GpuMeter:
    """One GPU's power and energy on the server's wall clock (``perf_counter_ns``). Steps are
    handed over as the pacing loop schedules them (``begin``); readings interpolate."""

    def __init__(self, gpu: GpuSpec, time_scale: float, start_ns: int) -> None:
        self.gpu = gpu
        self.scale = time_scale
        self._start, self._end, self._watts = start_ns, start_ns, gpu.idle_watts
        self._e0 = 0.0  # joules before the current segment
        self._seg_j = 0.0  # joules of the current segment
        self._busy: deque[tuple[int, int]] = deque()  # wall spans of recent steps
        self.steps = 0

    def begin(self, start_ns: int, step: Step) -> None:
        """``step`` runs from ``start_ns`` for its duration x time_scale of wall time."""
        start_ns = max(start_ns, self._end)  # segments never overlap
        self._e0 = self.energy_j(start_ns)
        watts = step_watts(self.gpu, step)
        self._start, self._end = start_ns, start_ns + int(step.duration_ns * self.scale)
        self._watts, self._seg_j = watts, watts * step.duration_ns / 1e9
        self._busy.append((self._start, self._end))
        self.steps += 1

    def energy_j(self, t_ns: int) -> float:
        """Joules since the meter started, at wall time ``t_ns``."""
        if t_ns < self._start:
            return self._e0
        if t_ns >= self._end:
            idle = self.gpu.idle_watts * (t_ns - self._end) / 1e9 / self.scale if self.scale else 0.0
            return self._e0 + self._seg_j + idle
        return self._e0 + self._seg_j * (t_ns - self._start) / (self._end - self._start)

    def watts(self, t_ns: int) -> float:
        return self._watts if self._start <= t_ns < self._end else self.gpu.idle_watts

    def utilization(self, t_ns: int) -> float:
        """Share (0-1) of the last engine second that a step ran."""
        window = int(UTIL_WINDOW_S * 1e9 * self.scale)
        if window <= 0:
            return 0.0
        lo = t_ns - window
        busy = self._busy
        while busy and busy[0][1] <= lo:
            busy.popleft()
        run = sum(max(0, min(e, t_ns) - max(s, lo)) for s, e in busy)
        return min(1.0, run / window)


class SimGpus:
    """The tensor-parallel group's GPUs: identical meters (each does 1/tp of every step), their
    memory from the engine's KV blocks, and the DCGM exposition of all of them."""

    def __init__(self, config: Any, start_ns: int) -> None:
        self.tp = config.tensor_parallel_size
        self.gpu: GpuSpec = config.parsed.gpu
        self.meter = GpuMeter(self.gpu, config.time_scale, start_ns)
        ph = config.physics
        self._weights = ph.weight_bytes / self.tp
        self._block_bytes = config.block_size * ph.kv_bytes_per_token / self.tp
        seed = f"{config.preset}/{config.seed}"
        self.uuids = [_uuid(f"{seed}/{i}") for i in range(self.tp)]

    def memory_used_bytes(self, engine: Engine) -> float:
        """One GPU's weights plus its share of the KV blocks in use."""
        return self._weights + (engine.total_blocks - engine.free_blocks) * self._block_bytes

    def energy_j(self, t_ns: int) -> float:
        """The whole group's joules since start (the ground truth beside the exporter's)."""
        return self.meter.energy_j(t_ns) * self.tp

    def render(self, engine: Engine, t_ns: int) -> str:
        """The DCGM exporter's exposition of every GPU at wall time ``t_ns``."""
        m, gpu = self.meter, self.gpu
        used = self.memory_used_bytes(engine)
        values = {
            "DCGM_FI_DEV_SM_CLOCK": str(gpu.sm_clock_mhz),
            "DCGM_FI_DEV_GPU_UTIL": str(round(m.utilization(t_ns) * 100)),
            "DCGM_FI_DEV_FB_FREE": str(round((gpu.memory_bytes - used) / MIB)),
            "DCGM_FI_DEV_FB_USED": str(round(used / MIB)),
            "DCGM_FI_DEV_POWER_USAGE": f"{m.watts(t_ns):.3f}",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": str(round(m.energy_j(t_ns) * 1e3)),
        }
        lines: list[str] = []
        for name, kind, help_ in FIELDS:
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            for i, uuid in enumerate(self.uuids):
                labels = (
                    f'gpu="{i}",UUID="{uuid}",pci_bus_id="00000000:{i + 0x18:02X}:00.0",'
                    f'device="nvidia{i}",modelName="{gpu.name}",Hostname="{HOSTNAME}"'
                )
                lines.append(f"{name}{{{labels}}} {values[name]}")
        return "\n".join(lines) + "\n"

    def info(self, engine: Engine, t_ns: int) -> dict[str, Any]:
        """``GET /sim/gpu``: the ground truth a test divides, read at one instant."""
        return {
            "t_ns": t_ns,
            "gpus": self.tp,
            "energy_j": self.energy_j(t_ns),
            "steps": self.meter.steps,
            "prompt_tokens_total": engine.prompt_tokens_total,
            "generation_tokens_total": engine.generation_tokens_total,
            "memory_used_bytes_per_gpu": self.memory_used_bytes(engine),
            "board_watts": self.gpu.board_watts,
            "idle_watts": self.gpu.idle_watts,
        }


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
