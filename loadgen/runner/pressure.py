"""Whether the machine was busy: how long runnable tasks waited for a CPU during the load.

Why: a client that trails (its event loop late, its chunk stamps behind the server's) is either
doing too much itself or being kept off the CPU by other processes, and the fix differs (more
workers, or an idle machine). Linux's pressure stall information says the second directly:
``/proc/pressure/cpu``'s ``some total`` counts the microseconds during which at least one
runnable task waited for a CPU. Its growth over the load, per second of the load, is the
fraction of the run the machine had more work than cores. It counts the run's own processes
too (the client and a built-in simulator share the cores), so the verdict compares it with what
the run's own CPU use explains (``health.busy_machine``).
"""

from __future__ import annotations

from pathlib import Path

PSI_CPU = Path("/proc/pressure/cpu")


def cpu_stall_us(path: Path = PSI_CPU) -> int | None:
    """Microseconds since boot during which some runnable task waited for a CPU; None where
    the kernel keeps no pressure stall information (not Linux, or PSI off)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            for field in line.split()[1:]:
                key, _, value = field.partition("=")
                if key == "total" and value.isdigit():
                    return int(value)
    return None
