"""A scripted Triton gRPC server for tests: KServe v2 ``ModelStreamInfer`` and the health and
metadata calls, streaming scripted token responses with a log of when each was sent.

``GrpcStreamServer`` runs it in its own process (``python -m loadgen.testing.grpc_server``), so
its timing is not disturbed by the client under test; it logs on the same monotonic clock
(``time.perf_counter_ns``) the instant before each response goes to ``context.write``. The log is
read with the unary call ``/loadgen.testing.ScriptLog/Get`` (``GrpcStreamServer.log()``): one
entry per response id (``grpc-test-N``, sent as the response's ``id``), the same fields as the
HTTP scripted server's (``recv_ns``, ``chunk_ns``, ``chunk_tokens``, ``first_token_ns``,
``end_ns``, ``prompt_tokens``) and the ``authorization`` metadata the call carried;
``/loadgen.testing.ScriptLog/OpenCalls`` counts the streams still open.

One model (``model``, default ``test-model``) with the TensorRT-LLM ensemble's inputs; an input
it does not declare is refused with an ``error_message``, as Triton refuses it. Behaviour
is scripted per request by the request parameter ``loadgen_test`` (JSON; loadgen sends
``target.extra_body``'s ``loadgen_test`` field as one) over the server's defaults: ``ttft_ms``,
``itl_ms``, ``tokens_per_chunk`` (int or a list cycled), ``fail_every``, ``empty_final`` (the
last token response is not flagged; an empty response flagged ``triton_final_response``
follows, as Triton sends it for a backend that flags the end alone), and ``fail``:

    error_message_after:<n>   response n is ``error_message: "scripted in-stream error"``
    no_final                  every token response, none flagged final; then the stream ends
    abort_after:<n>           the call ends with status UNAVAILABLE before response n
    status:<CODE>             the call ends with status CODE (e.g. INVALID_ARGUMENT) at once
    stall_after:<n>           nothing more after n responses (the client's timeout ends it)
    extra_after_final         one more token response after the one flagged final

``return_num_output_tokens`` / ``return_num_input_tokens`` (BOOL inputs, as Triton's vLLM
backend takes them) add ``num_output_tokens`` / ``num_input_tokens`` outputs. Like every test
server it imports nothing from the client side.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # its C core's INFO lines are not the log's
import grpc
import grpc.aio
from tritonclient.grpc import service_pb2, service_pb2_grpc

from loadgen.testing.common import WORDS, Log, end_process, pace_until, scripted

SERVICE = "inference.GRPCInferenceService"
LOG_SERVICE = "loadgen.testing.ScriptLog"
INPUTS = (
    ("text_input", "BYTES"),
    ("max_tokens", "INT32"),
    ("stream", "BOOL"),
    ("bad_words", "BYTES"),
    ("stop_words", "BYTES"),
    ("min_length", "INT32"),
    ("return_num_output_tokens", "BOOL"),
    ("return_num_input_tokens", "BOOL"),
)
_UNPACK = {"BOOL": "<?", "INT32": "<i", "INT64": "<q", "UINT32": "<I"}


def read_inputs(req: Any) -> dict[str, Any]:
    """A ``ModelInferRequest``'s inputs (raw contents): BYTES as str, numbers as Python's."""
    out: dict[str, Any] = {}
    for tensor, raw in zip(req.inputs, req.raw_input_contents):
        if tensor.datatype == "BYTES":
            (size,) = struct.unpack_from("<I", raw)
            out[tensor.name] = raw[4 : 4 + size].decode()
        else:
            out[tensor.name] = struct.unpack_from(_UNPACK[tensor.datatype], raw)[0]
    return out


class Scripted(service_pb2_grpc.GRPCInferenceServiceServicer):
    """The servicer: one model, scripted streams, the log; every other call is UNIMPLEMENTED."""

    def __init__(self, defaults: dict) -> None:
        self.defaults, self.pb = defaults, service_pb2
        self.log = Log()
        self.counter = itertools.count()
        self.open_calls = 0  # ModelStreamInfer calls not yet ended, cancelled or finished

    async def ModelStreamInfer(self, requests: Any, context: grpc.aio.ServicerContext) -> None:
        self.open_calls += 1
        try:
            async for req in requests:
                await self.play(req, context)
        finally:  # also when the client cancels the call: the handler is cancelled with it
            self.open_calls -= 1

    async def play(self, req: Any, context: grpc.aio.ServicerContext) -> None:
        pb, recv_ns = self.pb, time.perf_counter_ns()
        if req.model_name != self.defaults["model"]:
            msg = f"Request for unknown model: '{req.model_name}' is not found"
            await context.write(pb.ModelStreamInferResponse(error_message=msg))
            return
        fields = read_inputs(req)
        unexpected = sorted(set(fields) - {name for name, _ in INPUTS})
        if unexpected:  # as Triton refuses an input the model does not declare
            msg = f"unexpected inference input '{unexpected[0]}' for model '{req.model_name}'"
            await context.write(pb.ModelStreamInferResponse(error_message=msg))
            return
        params = req.parameters
        script = json.loads(params["loadgen_test"].string_param) if "loadgen_test" in params else {}
        cfg, n = scripted(self.defaults, {"loadgen_test": script}, self.counter)
        kind, _, arg = (cfg.get("fail") or "").partition(":")
        if kind == "status":
            await context.abort(getattr(grpc.StatusCode, arg), f"scripted {arg}")
        at = int(arg) if arg.isdigit() else -1
        n_out = int(fields.get("max_tokens") or cfg["default_tokens"])
        prompt_tokens = len(str(fields.get("text_input", "")).split())
        rid = f"grpc-test-{n}"
        entry = self.log.open(rid, recv_ns, SimpleNamespace(transport=None), prompt_tokens)
        entry["authorization"] = dict(context.invocation_metadata() or ()).get("authorization")
        tpc = cfg.get("tokens_per_chunk", 1)
        pattern = itertools.cycle(tpc if isinstance(tpc, list) else [tpc])
        start, itl_ns = recv_ns + int(cfg["ttft_ms"] * 1e6), int(cfg["itl_ms"] * 1e6)
        empty_final = bool(cfg.get("empty_final"))
        sent = k = 0
        while sent < n_out:
            if k == at and kind == "abort_after":
                entry["end_ns"] = time.perf_counter_ns()
                await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted UNAVAILABLE")
            if k == at and kind == "stall_after":
                await asyncio.sleep(3600)
            await pace_until(start + k * itl_ns)
            if k == at and kind == "error_message_after":
                entry["end_ns"] = time.perf_counter_ns()
                await context.write(pb.ModelStreamInferResponse(error_message="scripted in-stream error"))
                return
            tokens = min(next(pattern), n_out - sent)
            text = "".join(" " + WORDS[j % len(WORDS)] + str(j) for j in range(sent, sent + tokens))
            sent += tokens
            last = sent >= n_out and not empty_final and kind != "no_final"
            msg = self.response(rid, text, tokens, fields, prompt_tokens, last)
            # Logged before the write: a client that has its final response may cancel the call
            # while the write returns, and the handler with it.
            t = time.perf_counter_ns()
            entry["chunk_ns"].append(t)
            entry["chunk_tokens"].append(tokens)
            if entry["first_token_ns"] is None:
                entry["first_token_ns"] = t
            if last:
                entry["end_ns"] = t
            await context.write(msg)
            k += 1
        if kind == "extra_after_final":
            await context.write(self.response(rid, " extra", 1, fields, prompt_tokens, False))
        if empty_final and kind != "no_final":
            entry["end_ns"] = time.perf_counter_ns()
            await context.write(self.response(rid, None, 0, {}, prompt_tokens, True))
        if entry["end_ns"] is None:
            entry["end_ns"] = time.perf_counter_ns()

    def response(self, rid: str, text: str | None, tokens: int, fields: dict, prompt: int, last: bool) -> Any:
        """One ``ModelStreamInferResponse``: ``text_output`` (none for an empty final one),
        the counts the request asked for, the final flag."""
        pb = self.pb
        resp = pb.ModelInferResponse(model_name=self.defaults["model"], model_version="1", id=rid)
        if text is not None:
            data = text.encode()
            resp.outputs.add(name="text_output", datatype="BYTES", shape=[1, 1])
            resp.raw_output_contents.append(struct.pack("<I", len(data)) + data)
            for name, value in (("num_output_tokens", tokens), ("num_input_tokens", prompt)):
                if fields.get("return_" + name):
                    resp.outputs.add(name=name, datatype="INT32", shape=[1, 1])
                    resp.raw_output_contents.append(struct.pack("<i", value))
        resp.parameters["triton_final_response"].bool_param = last
        return pb.ModelStreamInferResponse(infer_response=resp)

    async def ServerLive(
        self, request: service_pb2.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.ServerLiveResponse:
        return self.pb.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: service_pb2.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.ServerReadyResponse:
        return self.pb.ServerReadyResponse(ready=True)

    async def ServerMetadata(
        self, request: service_pb2.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.ServerMetadataResponse:
        return self.pb.ServerMetadataResponse(
            name="triton", version="2.59.0-loadgen-test", extensions=["model_repository", "generate"]
        )

    async def ModelReady(
        self, request: service_pb2.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.ModelReadyResponse:
        ready = request.name == self.defaults["model"] and not self.defaults.get("not_ready")
        return self.pb.ModelReadyResponse(ready=ready)

    async def RepositoryIndex(
        self, request: service_pb2.RepositoryIndexRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.RepositoryIndexResponse:
        index = self.pb.RepositoryIndexResponse()
        index.models.add(name=self.defaults["model"], version="1", state="READY")
        return index

    async def ModelMetadata(
        self, request: service_pb2.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.ModelMetadataResponse:
        if request.name != self.defaults["model"]:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.name}'")
        meta = self.pb.ModelMetadataResponse(name=request.name, versions=["1"], platform="ensemble")
        for name, datatype in INPUTS:
            meta.inputs.add(name=name, datatype=datatype, shape=[-1, 1])
        meta.outputs.add(name="text_output", datatype="BYTES", shape=[-1, -1])
        return meta


async def run_server(defaults: dict, port: int = 0, host: str = "127.0.0.1") -> None:
    """Serve until cancelled; prints {"port": N} once listening."""
    servicer = Scripted(defaults)
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)

    async def get_log(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return json.dumps(list(servicer.log.entries.values())).encode()

    async def open_calls(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return json.dumps(servicer.open_calls).encode()

    async def clear_log(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        servicer.log.entries.clear()
        return b"{}"

    log_handlers = {
        "Get": grpc.unary_unary_rpc_method_handler(get_log),
        "Clear": grpc.unary_unary_rpc_method_handler(clear_log),
        "OpenCalls": grpc.unary_unary_rpc_method_handler(open_calls),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(LOG_SERVICE, log_handlers),))
    real = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    print(json.dumps({"port": real}), flush=True)
    await server.wait_for_termination()


class GrpcStreamServer:
    """The scripted gRPC server in a child process; ``with GrpcStreamServer(ttft_ms=50) as s: s.url``."""

    def __init__(self, **defaults: Any) -> None:
        self.defaults = {
            "ttft_ms": 50.0,
            "itl_ms": 10.0,
            "tokens_per_chunk": 1,
            "default_tokens": 16,
            "model": "test-model",
            "fail": "",
            **defaults,
        }
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> GrpcStreamServer:
        args = [sys.executable, "-m", "loadgen.testing.grpc_server", "--config", json.dumps(self.defaults)]
        root = str(Path(__file__).resolve().parents[2])  # this loadgen, installed or not
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join([root, *sys.path[:0]])}
        proc = self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert proc.stdout is not None and proc.stderr is not None  # both are PIPEs
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"gRPC test server failed to start: {proc.stderr.read()}")
        self.url = f"grpc://127.0.0.1:{json.loads(line)['port']}"
        return self

    def _call(self, method: str) -> bytes:
        with grpc.insecure_channel(self.url.removeprefix("grpc://")) as channel:
            out: bytes = channel.unary_unary(f"/{LOG_SERVICE}/{method}")(b"", timeout=10)
            return out

    def log(self) -> dict[str, dict]:
        return {e["id"]: e for e in json.loads(self._call("Get"))}

    def clear_log(self) -> None:
        self._call("Clear")

    def open_calls(self) -> int:
        """``ModelStreamInfer`` calls the server still has open (its handler not yet ended)."""
        return int(json.loads(self._call("OpenCalls")))

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            end_process(self.proc)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadgen.testing.grpc_server", description=__doc__)
    p.add_argument("--port", type=int, default=0, help="port to listen on (0 = any free port)")
    p.add_argument("--config", default="{}", help="JSON object of server defaults (ttft_ms, itl_ms, ...)")
    a = p.parse_args(argv)
    asyncio.run(run_server(json.loads(a.config), a.port))


if __name__ == "__main__":
    main()
