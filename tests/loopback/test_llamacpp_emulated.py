"""llama.cpp as a known engine, against a scripted llama-server on a real loopback socket.

The integration suite runs the real ``llama-server`` (tests/integration/test_llamacpp.py); this
one runs in every CI build against a server that answers as llama-server does, byte for byte
where it matters: ``/v1/models`` owned by ``llamacpp`` with ``meta.n_ctx`` (one slot's context),
``/props`` (``default_generation_settings.n_ctx``, ``total_slots``), its ``/tokenize`` dialect
(``{"content"}`` -> ``{"tokens"}``; vLLM's ``{"prompt"}`` gets no tokens) and
``/apply-template``, a 400 for a request past one slot's context, streams that end with
``timings`` and that carry ``Keep-Alive: timeout=5, max=100`` and are then closed by the server,
and ``llamacpp:`` metrics.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loadgen.errors import RunError
from loadgen.testing.hostile_wire import (
    Conn,
    Request,
    ThreadedServer,
    chunk,
    dumps,
    fin_after,
    response_head,
    sse,
)

import helpers
from helpers import run

N_CTX_SLOT, SLOTS = 64, 2
PROMPT_MS, PREDICTED_MS_PER_TOKEN = 2.5, 1.5


class FakeLlamaServer(ThreadedServer):
    """A scripted llama-server: one token a word, a BOS first; chat prompts through a template."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1", name="fake-llama-server")
        self.received_tokens: list[int] = []  # what each streamed request's prompt counted
        self.generated = 0

    def __enter__(self) -> FakeLlamaServer:
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._shutdown()

    @staticmethod
    def count(text: str) -> int:
        return 1 + len(text.split())

    @staticmethod
    def template(messages: list[dict[str, Any]]) -> str:
        return "".join(f"<|{m['role']}|> {m['content']} " for m in messages) + "<|assistant|>"

    async def _json(self, conn: Conn, status: int, obj: Any, close: bool = False) -> bool:
        body = dumps(obj)
        head = [
            ("Server", "llama.cpp"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
        ]
        await conn.send(response_head(status, head + [("Keep-Alive", "timeout=5, max=100")]) + body)
        return not close

    async def _route(self, conn: Conn, req: Request) -> bool:
        body = json.loads(req.body) if req.body else {}
        if req.path == "/v1/models":
            model = {"id": "tiny", "object": "model", "owned_by": "llamacpp", "meta": {"n_ctx": N_CTX_SLOT}}
            return await self._json(conn, 200, {"object": "list", "data": [model]})
        if req.path == "/props":
            props = {
                "default_generation_settings": {"n_ctx": N_CTX_SLOT},
                "total_slots": SLOTS,
                "build_info": "b1",
            }
            return await self._json(conn, 200, props)
        if req.path == "/tokenize":
            text = body.get("content")
            tokens = [] if not isinstance(text, str) else list(range(self.count(text)))
            return await self._json(conn, 200, {"tokens": tokens})
        if req.path == "/apply-template":
            return await self._json(conn, 200, {"prompt": self.template(body["messages"])})
        if req.path == "/metrics":
            text = (
                f"llamacpp:tokens_predicted_total {self.generated}\n"
                f"llamacpp:prompt_tokens_total {sum(self.received_tokens)}\n"
                "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n"
            ).encode()
            head = [("Content-Type", "text/plain"), ("Content-Length", str(len(text)))]
            await conn.send(response_head(200, head) + text)
            return True
        if req.path == "/v1/chat/completions":
            return await self._stream(conn, body)
        return await self._json(conn, 404, {"error": {"message": "no route"}})

    async def _stream(self, conn: Conn, body: dict[str, Any]) -> bool:
        prompt_n = self.count(self.template(body["messages"]))
        n = int(body["max_tokens"])
        self.received_tokens.append(prompt_n)
        if prompt_n + n > N_CTX_SLOT:
            msg = f"request ({prompt_n + n} tokens) exceeds the available context size ({N_CTX_SLOT} tokens)"
            return await self._json(conn, 400, {"error": {"code": 400, "message": msg}})
        head = [
            ("Server", "llama.cpp"),
            ("Content-Type", "text/event-stream"),
            ("Transfer-Encoding", "chunked"),
            ("Keep-Alive", "timeout=5, max=100"),
        ]
        await conn.send(response_head(200, head))
        base = {"id": f"chatcmpl-{len(self.received_tokens)}", "object": "chat.completion.chunk"}
        for _ in range(n):
            await conn.send(
                chunk(sse(dumps({**base, "choices": [{"index": 0, "delta": {"content": " w"}}]})))
            )
        self.generated += n
        timings = {
            "prompt_n": prompt_n,
            "prompt_ms": PROMPT_MS,
            "predicted_n": n,
            "predicted_ms": n * PREDICTED_MS_PER_TOKEN,
        }
        usage = {"completion_tokens": n, "prompt_tokens": prompt_n, "total_tokens": n + prompt_n}
        last = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "usage": usage}
        await conn.send(
            chunk(sse(dumps({**last, "timings": timings}))) + chunk(sse(b"[DONE]")) + b"0\r\n\r\n"
        )
        await fin_after(conn, 0.0)  # llama-server closes the connection after a stream
        return False


@pytest.fixture(scope="module")
def llama():
    with FakeLlamaServer() as srv:
        yield srv


def profile(tmp_path, url: str, **extra: Any):
    return helpers.profile(
        tmp_path,
        url,
        **{"workload.num_requests": 12, "load.warmup_requests": 0, "workload.input_tokens": 20, **extra},
    )


def test_a_llama_server_run_reads_its_props_tokenizer_timings_and_metrics(llama, tmp_path):
    res = run(profile(tmp_path, llama.url))
    s = res.summary
    assert (s["counts"]["ok"], s["counts"]["failed"]) == (12, 0)
    server = s["conditions"]["server"]
    assert server["props"] == {"n_ctx_slot": 64, "total_slots": 2, "build_info": "b1", "model_path": None}
    ident = server["identity"]
    assert (ident["engine"], ident["max_model_len"], ident["slots"]) == ("llama.cpp", 64, 2)
    assert ident["requests_over_max_model_len"] == 0
    fit = s["conditions"]["prompt_lengths"]
    assert fit["method"] == "server /tokenize (llama.cpp)" and fit["exact"] == 12
    assert s["conditions"]["prompt_lengths_approximate"] is False
    # The prompts were fitted with the server's own count: it received exactly 20 tokens each.
    assert llama.received_tokens[-12:] == [20] * 12
    for r in res.records:
        assert (r.server_prompt_ms, r.server_predicted_ms, r.server_predicted_tokens) == (2.5, 12.0, 8)
    t = s["metrics"]["server_timings"]
    assert t["requests"] == 12 and t["ttft"]["server_mean_ms"] == PROMPT_MS
    assert t["tpot"]["server_mean_ms"] == PREDICTED_MS_PER_TOKEN
    assert t["ttft"]["difference_ms"] == pytest.approx(t["ttft"]["client_mean_ms"] - PROMPT_MS)
    assert s["server"]["engine"] == "llamacpp"
    assert s["server"]["tokens"]["generation"] == 12 * 8


def test_requests_past_one_slot_are_refused_before_the_run_or_trimmed(llama, tmp_path):
    """60-token prompts and 16 tokens out cannot fit a 64-token slot: the run is refused before
    a request is sent, with the numbers; trim cuts them so the server takes every one; send
    sends them and the error rate fails the verdict."""
    long = {"workload.input_tokens": 60, "workload.output_tokens": 16, "workload.num_requests": 6}
    sent0 = len(llama.received_tokens)
    with pytest.raises(RunError) as info:
        run(profile(tmp_path, llama.url, **long))
    assert str(info.value).startswith(
        "6 of 6 requests need more than the server's context of 64 tokens per slot (llama.cpp splits "
        "its context over 2 slots): the longest asks 76 (prompt 60 + max_tokens 16)"
    )
    assert len(llama.received_tokens) == sent0  # nothing was streamed
    res = run(profile(tmp_path, llama.url, **long, **{"target.context_overflow": "trim"}))
    assert (res.summary["counts"]["ok"], res.summary["counts"]["failed"]) == (6, 0)
    assert res.summary["conditions"]["server"]["identity"]["requests_trimmed"] == 6
    assert all(r.requested_output_tokens == 4 for r in res.records)  # 64 - 60: the prompt kept
    send = {**long, "target.context_overflow": "send"}
    with pytest.raises(
        RunError, match=r"refused the preflight request \(HTTP 400\): request \(68 tokens\) exceeds"
    ):
        run(profile(tmp_path, llama.url, **send))  # the server's reason, before the load
    res = run(
        profile(
            tmp_path, llama.url, **send, **{"target.preflight": False, "sla.rules": ["p99 ttft_ms < 10000"]}
        )
    )
    assert res.summary["counts"]["errors_by_class"] == {"http_400": 6}
    assert res.summary["sla"]["verdict"] == "fail"
    reason = res.summary["sla"]["details"][0]["reason"]
    assert reason.startswith("6 of 6 requests failed (http_400 6)")
    assert (
        "exceeds the available context size" in res.summary["counts"]["error_samples"]["http_400"]["message"]
    )
    assert res.summary["counts"]["error_samples"]["http_400"]["hint"].startswith("the prompt")
