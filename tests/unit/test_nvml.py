"""NVML readings into the DCGM rows' keys (``server/nvml.py``). No GPU here, so a stand-in
``pynvml`` module answers the calls of nvidia-ml-py's API (names checked against its
pynvml.py): units converted (mW to W, bytes to MiB), a field a board refuses is None, and a
machine without a driver or a GPU is a sentence, not an exception."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from loadgen.server import dcgm
from loadgen.server.nvml import NvmlReader


class NVMLError(Exception):
    pass


def stand_in(count: int = 2, init_error: str | None = None) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM = 1

    def init():
        if init_error:
            raise NVMLError(init_error)

    def energy(h):
        if h == 1:
            raise NVMLError("Not Supported")
        return 6_396_375_061

    m.nvmlInit, m.nvmlShutdown = init, lambda: None
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetUUID = lambda h: f"GPU-000{h}".encode()
    m.nvmlDeviceGetName = lambda h: "NVIDIA H100 80GB HBM3"
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=72899 * 2**20, free=8141 * 2**20)
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=97, memory=61)
    m.nvmlDeviceGetPowerUsage = lambda h: 512_337
    m.nvmlDeviceGetTotalEnergyConsumption = energy
    m.nvmlDeviceGetClockInfo = lambda h, clock: 1980 if clock == 1 else 0
    return m


def test_a_reading_has_the_dcgm_rows_keys_and_units(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", stand_in())
    reader = NvmlReader.open()
    assert isinstance(reader, NvmlReader)
    rows = reader.read()
    assert [tuple(r) for r in rows] == [(*dcgm.ID_KEYS, *dcgm.ROW_KEYS)] * 2
    assert {k: rows[0][k] for k in ("gpu", "uuid", "model", *dcgm.ROW_KEYS)} == {
        "gpu": "0",
        "uuid": "GPU-0000",
        "model": "NVIDIA H100 80GB HBM3",
        "util_pct": 97.0,
        "fb_used_mib": 72899.0,
        "fb_free_mib": 8141.0,
        "power_w": 512.337,
        "energy_mj": 6_396_375_061,
        "sm_clock_mhz": 1980,
    }
    assert rows[1]["energy_mj"] is None  # this board has no energy counter


@pytest.mark.parametrize(
    ("module", "note"),
    [
        (
            stand_in(init_error="NVML Shared Library Not Found"),
            "telemetry.nvml: NVML could not be read (NVML Shared Library Not Found): no NVIDIA "
            "driver or GPU here",
        ),
        (stand_in(count=0), "telemetry.nvml: NVML sees no GPU on this machine"),
        (None, "telemetry.nvml: nvidia-ml-py is not installed (pip install 'loadgen[nvml]')"),
    ],
)
def test_no_driver_no_gpu_no_library_is_said(monkeypatch, module, note):
    monkeypatch.setitem(sys.modules, "pynvml", module)  # None: the import fails
    assert NvmlReader.open() == note
