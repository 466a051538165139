"""Helpers the test files import (``from helpers import run``); fixtures stay in conftest.py.

One of each: ``profile`` builds a profile from dotted overrides (the ``make_profile`` fixture
wraps it), ``cli`` runs ``python -m loadgen`` in a subprocess, ``ok_record``/``failed_record``
build records from literal milliseconds, ``run`` runs a profile as ``loadgen run`` does. A
timing bound in absolute units goes through ``assert_within``/``assert_percentiles`` (in a test
marked ``timing_absolute``), which print measured, bound and margin (``pytest -rA`` shows them).

A plain module on the tests' path rather than names taken from conftest.py: pytest imports a
conftest itself, under its own rules, and importing it again as a module is not supported.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.backends.transports import httptools_conn, httptools_pool
from loadgen.config import load_profile
from loadgen.records import RequestRecord
from loadgen.runner import api

ROOT = Path(__file__).resolve().parent.parent
MS = 1_000_000


# The TPOT-bound capacity case (Llama-2-7B FP16 on one L40S, 256-token prompts, 32-token
# answers): searched in real time at time_scale 0.25 (tests/unit/test_capacity.py) and, from its
# workload alone, in virtual time (tests/slow/test_capacity_virtual.py).
TPOT_BOUND_PROFILE = """
name: capacity-sim
target: {endpoint: completions, prompt_format: token_ids, ignore_eos: true}
workload: {seed: 1, num_requests: 100, input_tokens: 256, output_tokens: 32}
load: {rate: 32}
output: {progress: false}
sim: {preset: llama2-7b-fp16@l40s, time_scale: 0.5}
"""
LOADGEN = (sys.executable, "-m", "loadgen")  # for the few tests that start it with Popen and kill it


def schema_errors(name: str, data: Any) -> list[str]:
    """Where ``data`` does not match the committed ``schemas/<name>.schema.json`` (summary,
    capacity or experiment), one line a place; empty when it conforms."""
    import json

    import jsonschema

    schema = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    check = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return [f"{list(e.absolute_path)}: {e.message}" for e in check.iter_errors(data)]


def cli_env() -> dict[str, str]:
    """This process's environment (so the tests' private LOADGEN_CACHE_DIR holds) with this
    checkout first on PYTHONPATH: the environment every ``python -m loadgen`` of the tests gets."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def cli(
    *args: str, cwd: Path | None = None, timeout: float = 120, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """``python -m loadgen ARGS`` in ``cwd`` (cli_env, output captured as text), bounded by
    ``timeout``; ``kw`` goes to subprocess.run (``preexec_fn=`` for a resource limit, ``env=``)."""
    kw.setdefault("env", cli_env())
    return subprocess.run([*LOADGEN, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)


def profile(out: Path, url: str | None, **overrides: Any) -> Any:
    """A validated profile, as if the CLI had been given these dotted overrides (``load.rate`` or
    ``load__rate``), writing under ``out/reports``. Defaults: 8 requests at c=2, 32 tokens in and
    8 out, no progress bar; ``url=None`` with a ``sim`` section runs the built-in simulator. An
    override of None leaves that field to the profile's own default (``load__concurrency=None``
    with ``load__rate=4`` is an open loop)."""
    base: dict[str, Any] = {
        "target.url": url,
        "workload.num_requests": 8,
        "load.concurrency": 2,
        "workload.input_tokens": 32,
        "workload.output_tokens": 8,
        "output.dir": str(out / "reports"),
        "output.progress": False,
    }
    base.update({k.replace("__", "."): v for k, v in overrides.items()})
    return load_profile(None, overrides={k: v for k, v in base.items() if v is not None})


def ok_record(
    id: int = 0,
    send_ms: int = 0,
    ttft_ms: int = 100,
    gaps_ms: tuple[int, ...] = (10, 10, 10),
    tokens: tuple[int, ...] = (1, 1, 3, 1),
    warmup: bool = False,
    sched_ms: int | None = None,
    end_after_last_ms: int = 5,
    **kw: Any,
) -> RequestRecord:
    """An ok streamed request from literal milliseconds: sent at ``send_ms``, first chunk
    ``ttft_ms`` later, then one chunk after each gap, carrying ``tokens``; any field in ``kw``."""
    send = send_ms * MS
    times = [send + ttft_ms * MS]
    for g in gaps_ms:
        times.append(times[-1] + g * MS)
    fields: dict[str, Any] = dict(
        id=id,
        warmup=warmup,
        t_sched_ns=(send_ms if sched_ms is None else sched_ms) * MS,
        t_send_ns=send,
        requested_output_tokens=sum(tokens),
        requested_prompt_tokens=10,
        ok=True,
        t_first_byte_ns=send + (ttft_ms - 20) * MS,
        t_first_token_ns=times[0],
        t_end_ns=times[-1] + end_after_last_ms * MS,
        chunk_times_ns=times,
        chunk_tokens=list(tokens),
        prompt_tokens=10,
        output_tokens=sum(tokens),
    )
    fields.update(kw)
    return RequestRecord(**fields)


def failed_record(
    id: int = 0,
    send_ms: int = 0,
    end_ms: int | None = 50,
    error_class: str = "http_500",
    warmup: bool = False,
) -> RequestRecord:
    """A request that failed without streaming content."""
    return RequestRecord(
        id=id,
        warmup=warmup,
        t_sched_ns=send_ms * MS,
        t_send_ns=send_ms * MS,
        requested_output_tokens=5,
        requested_prompt_tokens=10,
        ok=False,
        error_class=error_class,
        t_end_ns=None if end_ms is None else end_ms * MS,
    )


def run(profile: Any, **kw: Any) -> Any:
    """Run a profile to completion in a fresh event loop, as `loadgen run` does."""
    return asyncio.run(api.run_async(profile, **kw))


def slow_client(monkeypatch: pytest.MonkeyPatch, burn_ms: float) -> None:
    """Make this process's client slow on purpose: every read of the (default) httptools
    transport costs ``burn_ms`` of CPU before it is stamped, so reads that arrive together are
    stamped one burn after another, as on a client whose read path is that slow. (A burn in
    the consumer would not do: the transport stamps every read of a loop turn before parsing
    any of them.)"""
    clock = httptools_pool.now_ns

    def slow_now() -> int:
        until = clock() + int(burn_ms * 1e6)
        while clock() < until:
            pass
        return clock()

    monkeypatch.setattr(httptools_conn, "now_ns", slow_now)  # the reads' stamps
    monkeypatch.setattr(httptools_pool, "now_ns", slow_now)


def margin(measured: float, bound: float, what: str, unit: str = "ms") -> str:
    """``what: measured X vs bound Y (margin Z)``: the line a timing assertion prints."""
    u = f" {unit}" if unit else ""
    return f"{what}: measured {measured:.3f}{u} vs bound {bound:g}{u} (margin {bound - measured:+.3f}{u})"


def assert_within(measured: float, bound: float, what: str, unit: str = "ms") -> None:
    """Assert ``measured < bound`` for a test marked ``timing_absolute`` (a bound in absolute
    units), printing the margin either way, so ``-rA`` and every failure show how close it ran."""
    line = margin(measured, bound, what, unit)
    print(line)
    assert measured < bound, line


def assert_percentiles(values: Any, what: str, unit: str = "ms", **bounds: float) -> None:
    """``assert_within`` for several statistics of ``values`` at once (``p50=0.5, p95=2.0,
    max=5.0``): every margin is printed before a bound that is not met fails the test."""
    failed = []
    for stat, bound in bounds.items():
        measured = float(np.max(values) if stat == "max" else np.percentile(values, float(stat[1:])))
        line = margin(measured, bound, f"{what} {stat}", unit)
        print(line)
        if not measured < bound:
            failed.append(line)
    assert not failed, "; ".join(failed)


def alive_with(marker: str) -> list[str]:
    """Command lines of live (not zombie) processes that mention ``marker``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z" and int(pid) != os.getpid():
            out.append(cmd)
    return out
