"""Why the client trailed: the machine's CPU pressure read from the kernel's file, and the
busy-machine sentence the client block keeps and names among a client_limited warning's reasons."""

from __future__ import annotations

from loadgen.runner import pressure
from loadgen.runner.driver import DriveResult
from loadgen.runner.health import BUSY_STALL_FRACTION, assess, busy_machine

from helpers import ok_record

PSI = (
    "some avg10=2.61 avg60=2.67 avg300=2.74 total=700746672\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


def test_the_pressure_file_gives_the_some_total_in_microseconds(tmp_path):
    path = tmp_path / "cpu"
    path.write_text(PSI)
    assert pressure.cpu_stall_us(path) == 700746672
    assert pressure.cpu_stall_us(tmp_path / "absent") is None
    path.write_text("full avg10=0.00 total=5\n")  # no `some` line: nothing to say
    assert pressure.cpu_stall_us(path) is None


def test_a_machine_is_busy_from_the_threshold_up():
    assert busy_machine(None) is None
    assert busy_machine(BUSY_STALL_FRACTION - 0.01) is None
    said = busy_machine(0.41)
    assert said is not None and said.startswith("the machine was busy: a runnable task waited for a CPU 41 %")
    assert "rerun on an idle machine" in said


def _result(lag_ms: float) -> DriveResult:
    res = DriveResult(records=[], started_ns=0, ended_ns=2_000_000_000, interrupted=False)
    res.loop_lag_ns.extend([int(lag_ms * 1e6)] * 50)
    return res


def test_the_busy_machine_is_named_among_a_client_limited_warnings_reasons():
    records = [ok_record(i) for i in range(20)]
    late = assess(_result(lag_ms=40.0), 0.2, records, capped=False, cpu_stall_fraction=0.6)
    warning = next(w for w in late["warnings"] if w["warning"] == "client_limited")
    assert late["busy_machine"] in warning["reasons"] and late["machine_cpu_stall_fraction"] == 0.6
    punctual = assess(_result(lag_ms=0.1), 0.2, records, capped=False, cpu_stall_fraction=0.6)
    assert punctual["busy_machine"] and not punctual["client_limited"]  # kept, not a warning
    idle = assess(_result(lag_ms=0.1), 0.2, records, capped=False, cpu_stall_fraction=0.01)
    assert "busy_machine" not in idle and idle["machine_cpu_stall_fraction"] == 0.01
