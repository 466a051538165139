"""What the server is: engine, version, served model and its context length, from what the
protocol adapter's probe heard."""

from __future__ import annotations

from typing import Any

from loadgen.server.fit import FIT_LIMIT


def identity(server: dict, specs: Any, total: int | None) -> dict:
    """Who answered: engine, version, served model and its context length, from what the
    server said; and how many requests would not fit that context (they will fail)."""
    models = (server.get("models") or {}).get("data") or [{}]
    first = models[0] if isinstance(models[0], dict) else {}
    version = server.get("version")
    owned_by = first.get("owned_by")
    engine = {"vllm": "vllm", "sglang": "sglang", "loadgen-sim": "loadgen-sim",
              "tensorrt_llm": "tensorrt-llm", "llamacpp": "llama.cpp"}.get(str(owned_by).lower())
    if server.get("protocol") == "triton_generate":  # the native probes say whom they asked
        engine, first = "triton", {"id": (server.get("model_metadata") or {}).get("name")}
    elif server.get("protocol") == "sglang_generate":
        engine = "sglang"
    header = (server.get("headers") or {}).get("server", "")
    out = {"engine": engine or owned_by, "version": version.get("version") if isinstance(version, dict) else version,
           "served_model": first.get("id"), "root": first.get("root"),
           "max_model_len": first.get("max_model_len"), "server_header": header or None}
    limit = out["max_model_len"]
    if isinstance(limit, int) and total:
        n = min(total, FIT_LIMIT)
        over = sum(1 for i in range(n)
                   if (s := specs.request(i)).prompt_tokens + s.output_tokens > limit)
        out["requests_over_max_model_len"] = over
    return out
