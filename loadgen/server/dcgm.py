"""NVIDIA DCGM exporter text as telemetry rows: one row per GPU per scrape.

The exporter (github.com/NVIDIA/dcgm-exporter) serves Prometheus text with one sample per GPU
per field, labelled ``gpu`` (index), ``UUID``, ``modelName`` and ``Hostname`` (and more). Its
default field list (``etc/default-counters.csv``) has the ones read here; units as it says:
utilisation in %, framebuffer in MiB, power in W, the energy counter in mJ since boot, the SM
clock in MHz. A field the exporter was not configured to collect is ``None`` in the row.

A row's GPU is its ``UUID`` when the exporter gives one (it stays with the board when indices
are renumbered), else ``<Hostname>/<gpu>``.
"""

from __future__ import annotations

from loadgen.server import metrics as sm

# DCGM field -> the row's key (the same keys as an NVML reading's, ``nvml.py``).
FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
}
ROW_KEYS: tuple[str, ...] = tuple(FIELDS.values())
# What identifies a GPU in a row, then its readings.
ID_KEYS: tuple[str, ...] = ("gpu", "uuid", "model", "host")
# Line prefixes a scrape keeps during the load (parsed after it, as the /metrics scraper does).
WANTED: tuple[bytes, ...] = tuple(name.encode() for name in FIELDS)


def gpu_rows(body: bytes | str) -> list[dict]:
    """Every GPU of one scrape: ``ID_KEYS`` and ``ROW_KEYS``, in the order first seen.
    ``ValueError`` when the body is not Prometheus text."""
    rows: dict[str, dict] = {}
    for name, samples in sm.parse(body).items():
        # prometheus_client's parser names a counter's samples <name>_total, as the exporter's
        # TYPE line makes DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION a counter; kept lines (no TYPE) not.
        key = FIELDS.get(name.removesuffix("_total"))
        if key is None:
            continue
        for labels, value in samples:
            host, index = labels.get("Hostname", ""), labels.get("gpu", "")
            uuid = labels.get("UUID") or f"{host}/{index}"
            row = rows.get(uuid)
            if row is None:
                row = rows[uuid] = {
                    "gpu": index,
                    "uuid": uuid,
                    "model": labels.get("modelName"),
                    "host": host or None,
                    **dict.fromkeys(ROW_KEYS),
                }
            row[key] = value
    return list(rows.values())
