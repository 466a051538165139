"""What the server is, and prompts fitted to its tokenizer: the run's setup against a target.

``identity`` names who answered (engine, version, served model and its context length) from
what the probes heard; ``fit_for_profile`` decides how prompt lengths are made exact (token
ids, a local tokenizer, or the server's /tokenize) and records which was used.
"""

from __future__ import annotations

from typing import Any, Callable

from loadgen.profile import Profile
from loadgen.server_tokenize import ServerTokenizer, fit_prompts
from loadgen.workload import Workload

# Beyond this many requests (an unbounded duration run), prompts stay approximate.
FIT_LIMIT = 20_000


async def fit_for_profile(profile: Profile, transport: Any, model: str, workload: Workload,
                          total: int | None, status: Callable[[str], None]) -> tuple[Any, dict]:
    """Exact prompt lengths from the server's /tokenize when it has one and nothing better is
    configured; otherwise the workload as it is, and how its lengths were made."""
    t = profile.target
    if t.prompt_format == "token_ids":
        return workload, {"method": "token ids (exact)"}
    if workload.tokenizer is not None:
        return workload, {"method": "local tokenizer (exact)"}
    approx = {"method": "approximate (one common word ~ one token)"}
    if profile.workload.prompt.server_tokenize == "never" or t.endpoint not in ("chat", "completions"):
        return workload, approx
    tokenizer = ServerTokenizer(transport, model, chat=t.endpoint == "chat")
    if not await tokenizer.available():
        return workload, {**approx, "server_tokenize": "not offered by the server"}
    n = min(total if total is not None else FIT_LIMIT, FIT_LIMIT)
    status(f"fitting {n} prompts to exact lengths with the server's /tokenize")
    specs, info = await fit_prompts(tokenizer, workload, n)
    if total is None:
        info["note"] = f"requests past {n} keep approximate lengths"
    return specs, info


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
