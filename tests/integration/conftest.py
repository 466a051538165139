"""Real engines for the integration suite (vLLM, llama.cpp's llama-server, Hugging Face's
transformers serve), each started once for the package by its fixture.

The engine is "available" when ``python scripts/real_engines.py setup`` has installed vLLM into
its cached venv and built the tiny model; otherwise every test here is skipped (with the reason
and that command). The suite runs when it is asked for: ``python -m pytest -q tests/integration``
(a path inside this directory on the command line) or ``LOADGEN_REAL_ENGINES=1``. The default
``python -m pytest -q`` skips it even when the engine is set up: vLLM takes both cores of a small
machine for a minute and a half, which the default suite (and its timing tests, and anyone else's
on a shared machine) should not pay. Environment:

    LOADGEN_REAL_ENGINES=1   run it; the engine must be there (a missing setup fails, not skips)
    LOADGEN_REAL_ENGINES=0   skip it even when asked for by path
    LOADGEN_VLLM_URL=URL     use a vLLM already running there (nothing is started or stopped)

llama-server and transformers serve have their own setup scripts (scripts/llamacpp_engine.py,
scripts/transformers_engine.py), both run by ``real_engines.py setup``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadgen.config import load_profile

ROOT = Path(__file__).resolve().parents[2]


def _load_script(file: str = "real_engines.py"):
    """A script of scripts/ as a module (it is a script, not part of the package)."""
    name = "loadgen_" + file.removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


real_engines = _load_script()
llamacpp_engine = _load_script("llamacpp_engine.py")
transformers_engine = _load_script("transformers_engine.py")


@dataclass(frozen=True)
class Engine:
    url: str
    model: str

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return r.read().decode()

    def post(self, path: str, body: dict) -> Any:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())


def _model_at(url: str) -> str:
    with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=10) as r:
        return json.loads(r.read())["data"][0]["id"]


def _asked_for(config) -> bool:
    """True when a command-line path points into this directory (or names one of its tests)."""
    here = Path(__file__).resolve().parent
    for arg in config.args:
        p = Path(str(arg).split("::")[0])
        p = (Path(config.invocation_params.dir) / p).resolve()
        if p == here or here in p.parents:
            return True
    return False


def _wanted(request) -> str | None:
    """Skip unless the real-engine suite was asked for; the LOADGEN_REAL_ENGINES flag."""
    flag = os.environ.get("LOADGEN_REAL_ENGINES")
    if flag == "0":
        pytest.skip("LOADGEN_REAL_ENGINES=0")
    if flag != "1" and not _asked_for(request.config):
        pytest.skip(
            "the real-engine suite runs when asked for: "
            "python -m pytest -q tests/integration (or LOADGEN_REAL_ENGINES=1)"
        )
    return flag


def _require(flag: str | None, available: tuple[bool, str], engine: str, setup: str) -> None:
    """Skip when ``engine`` is not set up, or fail when LOADGEN_REAL_ENGINES=1 asked for it."""
    ok, why = available
    if ok:
        return
    msg = f"{engine} not available: {why}; set it up with: {setup}"
    if flag == "1":
        pytest.fail("LOADGEN_REAL_ENGINES=1 but " + msg)
    pytest.skip(msg)


@pytest.fixture(scope="package")
def vllm(request):
    """A running vLLM (the tiny model), stopped when the package's tests are done."""
    flag = _wanted(request)
    url = os.environ.get("LOADGEN_VLLM_URL")
    if url:
        yield Engine(url.rstrip("/"), _model_at(url))
        return
    _require(flag, real_engines.available(), "real vLLM", real_engines.SETUP_HINT)
    # Tool parsing on, for the tool-call tests (a named tool_choice needs a parser set).
    yield from _own_vllm("", ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"])


@pytest.fixture(scope="package")
def vllm_pooling(request):
    """A second vLLM serving the tiny model as an embedding model (``--runner pooling --convert
    embed``): /v1/embeddings and /v1/rerank; stopped when the package's tests are done."""
    _require(_wanted(request), real_engines.available(), "real vLLM", real_engines.SETUP_HINT)
    yield from _own_vllm("pool-", ["--runner", "pooling", "--convert", "embed"])


def _own_vllm(kind: str, extra_args: list[str]) -> Iterator[Engine]:
    """A vLLM of this session's own (a concurrent suite, or `serve` by hand, never shares it,
    so the /metrics deltas count only these tests' requests), pinned to its core
    (real_engines.server_cpus) while the client takes the others, so neither measures the
    other's CPU contention; stopped after."""
    name = f"pytest-{kind}{os.getpid()}"
    try:
        st = real_engines.serve(name=name, extra_args=extra_args)
    except RuntimeError as exc:
        pytest.fail(f"vLLM ({' '.join(extra_args)}) did not start: {exc}")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, real_engines.client_cpus())
    try:
        yield Engine(st["url"], st["model"])
    finally:
        os.sched_setaffinity(0, before)
        real_engines.stop(name=name)


@pytest.fixture(scope="package")
def llamacpp(request):
    """A running llama-server (the tiny GGUF, -c 8192 -np 8 --metrics -t 1) pinned to core 0,
    the client on the others; stopped when the package's tests are done."""
    flag = _wanted(request)
    _require(flag, llamacpp_engine.available(), "llama-server", "python scripts/llamacpp_engine.py setup")
    try:
        st = llamacpp_engine.serve(cpus={0})
    except RuntimeError as exc:
        pytest.fail(f"llama-server did not start: {exc}")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, (before - {0}) or before)
    try:
        yield Engine(st["url"], st["model"])
    finally:
        os.sched_setaffinity(0, before)
        if not st.get("reused"):
            llamacpp_engine.stop()


@pytest.fixture(scope="package")
def tfserve(request):
    """A running ``transformers serve --continuous-batching --device cpu`` (the tiny model, a
    bounded KV cache) pinned to core 0 with one torch thread, the client on the others; its own
    state files (a concurrent session never shares it); stopped when the package's tests are
    done. ``model`` is the model's path: the server refuses any other name."""
    flag = _wanted(request)
    _require(flag, transformers_engine.available(), "transformers serve", transformers_engine.SETUP_HINT)
    name = f"pytest-{os.getpid()}"
    try:
        st = transformers_engine.serve(name=name)
    except RuntimeError as exc:
        pytest.fail(f"transformers serve did not start: {exc}")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, real_engines.client_cpus())
    try:
        yield Engine(st["url"], st["model"])
    finally:
        os.sched_setaffinity(0, before)
        transformers_engine.stop(name=name)


def profile_maker(engine: Engine, tmp_path: Path, **defaults: Any):
    """``make(**overrides)``: a profile against ``engine``, as if the CLI had been given these
    dotted overrides (``a__b`` for ``a.b``) over ``defaults``."""

    def make(**overrides: Any):
        base = {
            "target.url": engine.url,
            "target.model": engine.model,
            "output.dir": str(tmp_path / "reports"),
            "output.progress": False,
            **{k.replace("__", "."): v for k, v in defaults.items()},
        }
        base.update({k.replace("__", "."): v for k, v in overrides.items()})
        return load_profile(None, overrides=base)

    return make


@pytest.fixture
def llamacpp_profile(llamacpp, tmp_path: Path):
    """80 requests of 300 / 100 tokens at c=8 against llama-server, no warm-up."""
    return profile_maker(
        llamacpp,
        tmp_path,
        workload__num_requests=80,
        load__concurrency=8,
        load__warmup_requests=0,
        workload__input_tokens=300,
        workload__output_tokens=100,
    )


@pytest.fixture
def vllm_profile(vllm, tmp_path: Path):
    """8 requests of 64 / 16 tokens at c=4 against the vLLM server."""
    return profile_maker(
        vllm,
        tmp_path,
        workload__num_requests=8,
        load__concurrency=4,
        workload__input_tokens=64,
        workload__output_tokens=16,
    )


@pytest.fixture
def both_engines_set_up(request):
    """vLLM's venv and llama-server are installed (nothing started): the scripts' modules, for
    a test that starts the engines itself (the experiment's `serve:` backends)."""
    flag = _wanted(request)
    _require(flag, real_engines.available(), "vLLM", "python scripts/real_engines.py setup")
    _require(flag, llamacpp_engine.available(), "llama.cpp", "python scripts/llamacpp_engine.py setup")
    return real_engines, llamacpp_engine
