"""This machine's GPUs through NVML (``nvidia-ml-py``, the optional extra ``loadgen[nvml]``),
read as the DCGM exporter reads them, into the same rows (``dcgm.ROW_KEYS``).

Why it says, and never fails: a run on a laptop or a CPU-only CI runner with ``nvml: true`` in
its profile must still run; its summary says there was nothing to read and why (no library, no
driver, no GPU). NVML's calls take microseconds to a millisecond; the scraper makes them in a
thread so the run's event loop never waits on the driver.
"""

from __future__ import annotations

import socket
from typing import Any

INSTALL = "pip install 'loadgen[nvml]'"


class NvmlReader:
    """The GPUs NVML sees; ``read()`` gives one row per GPU (``dcgm.ID_KEYS`` and ``ROW_KEYS``)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._host = socket.gethostname()
        n = nvml.nvmlDeviceGetCount()
        self._gpus = []
        for i in range(n):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            self._gpus.append((i, h, _text(nvml.nvmlDeviceGetUUID(h)), _text(nvml.nvmlDeviceGetName(h))))

    @classmethod
    def open(cls) -> NvmlReader | str:
        """A reader, or the sentence saying why there is none."""
        try:
            import pynvml  # nvidia-ml-py, an optional extra
        except ImportError:
            return f"telemetry.nvml: nvidia-ml-py is not installed ({INSTALL})"
        try:
            pynvml.nvmlInit()
            reader = cls(pynvml)
        except Exception as exc:  # noqa: BLE001 - NVMLError of any kind: no driver, no GPU
            return f"telemetry.nvml: NVML could not be read ({exc}): no NVIDIA driver or GPU here"
        if not reader._gpus:
            reader.close()
            return "telemetry.nvml: NVML sees no GPU on this machine"
        return reader

    def read(self) -> list[dict]:
        """One reading of every GPU; a field NVML refuses on this board is ``None``."""
        nv = self._nvml
        rows = []
        for i, h, uuid, name in self._gpus:
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            util = _try(nv.nvmlDeviceGetUtilizationRates, h)
            power_mw = _try(nv.nvmlDeviceGetPowerUsage, h)
            rows.append(
                {
                    "gpu": str(i),
                    "uuid": uuid,
                    "model": name,
                    "host": self._host,
                    "util_pct": None if util is None else float(util.gpu),
                    "fb_used_mib": None if mem is None else mem.used / 2**20,
                    "fb_free_mib": None if mem is None else mem.free / 2**20,
                    "power_w": None if power_mw is None else power_mw / 1e3,
                    "energy_mj": _try(nv.nvmlDeviceGetTotalEnergyConsumption, h),
                    "sm_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                }
            )
        return rows

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that is going away anyway
            pass


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a field this board does not support
        return None


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
