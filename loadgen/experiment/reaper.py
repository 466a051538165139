"""The server's reaper: run as a script (``python reaper.py PGID GRACE``) beside a server that
``loadgen experiment`` started, with its stdin a pipe from loadgen.

It blocks reading that pipe. loadgen closes it after stopping the server itself; if loadgen
dies first (Ctrl-C twice, SIGTERM, ``kill -9``, a crash), the kernel closes it, and the reaper
ends the server's whole process group: SIGTERM, then SIGKILL after GRACE seconds. Why a second
process: a ``kill -9`` runs no handler in loadgen, and Linux's parent-death signal reaches only
the direct child, not the engine workers a server such as vLLM forks into its group.

Standard library only, and no import of loadgen: it must start in milliseconds and must not
depend on the package that just died.
"""

import os
import signal
import sys
import time


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def main() -> None:
    pgid, grace = int(sys.argv[1]), float(sys.argv[2])
    while sys.stdin.buffer.read(4096):
        pass  # loadgen never writes; EOF is the signal
    if not alive(pgid):
        return
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pgid):
        time.sleep(0.1)
    if alive(pgid):
        os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the terminal is loadgen's to handle
    main()
