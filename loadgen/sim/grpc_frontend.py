"""The simulator behind Triton's KServe v2 gRPC frontend: ``ModelStreamInfer`` and the health and
metadata calls, off the same engine, pacer and ground-truth log as the HTTP server.

A ``ModelStreamInfer`` request is read as the completions request of the same prompt (so its
prompt count and its words are the HTTP server's): ``text_input`` is the prompt, ``max_tokens``
and ``min_length`` (the TensorRT-LLM ensemble's inputs) or the vLLM backend's
``sampling_parameters`` JSON (``max_tokens``, ``min_tokens``, ``ignore_eos``) bound the output.
Each token goes out as one ``ModelStreamInferResponse`` with ``text_output`` (its word); the
last one carries ``triton_final_response: true``. A request the HTTP server would refuse, or
with an input the model does not declare, gets an ``error_message`` response, as Triton reports
an error inside the stream. Responses carry the
simulator's response id (``triton-sim-N``), which the ground-truth log's ``id`` names.

The messages are written as bytes the encoder serialized (the channel has no serializer), the
instant after the pacer stamps ``chunk_ns``, as for HTTP. ``grpcio`` and the stubs come with the
optional extra ``loadgen[grpc]``; the server imports this module only when asked for a gRPC
port. Like the rest of the simulator it imports nothing of the client.
"""

from __future__ import annotations

import json
import os
import struct
import time
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # its C core's INFO lines are not the log's
import grpc
import grpc.aio
from tritonclient.grpc import service_pb2 as pb

from .requests import BadRequest, parse_request

SERVICE = "inference.GRPCInferenceService"
VERSION = "2.59.0-loadgen-sim"
INPUTS = (
    ("text_input", "BYTES"),
    ("max_tokens", "INT32"),
    ("stream", "BOOL"),
    ("bad_words", "BYTES"),
    ("stop_words", "BYTES"),
    ("min_length", "INT32"),
    ("end_id", "INT32"),
    ("sampling_parameters", "BYTES"),
)
_UNPACK = {"BOOL": "<?", "INT32": "<i", "INT64": "<q", "UINT32": "<I", "UINT64": "<Q"}


class GrpcEncoder:
    """One request's responses, serialized: a token's word as ``text_output``, the last one
    flagged final. No opening and no closing message: the end is the last token's flag."""

    __slots__ = ("rid", "model", "n_reason")

    def __init__(self, rid: str, model: str) -> None:
        self.rid, self.model = rid, model
        self.n_reason = 0

    def start(self) -> bytes:
        return b""

    def token(self, word_json: bytes, completion_tokens: int, finish_reason: bytes = b"null") -> bytes:
        return self.response(json.loads(word_json).encode(), finish_reason != b"null")

    def end(self, completion_tokens: int, include_usage: bool, finish_reason: str = "length") -> bytes:
        return b""

    def response(self, text: bytes | None, final: bool) -> bytes:
        resp = pb.ModelInferResponse(model_name=self.model, model_version="1", id=self.rid)
        if text is not None:
            resp.outputs.add(name="text_output", datatype="BYTES", shape=[1, 1])
            resp.raw_output_contents.append(struct.pack("<I", len(text)) + text)
        resp.parameters["triton_final_response"].bool_param = final
        return pb.ModelStreamInferResponse(infer_response=resp).SerializeToString()


class CallWriter:
    """A gRPC call as the pacer's ``st.response``: one message a write; a call that has ended
    (the client cancelled it) is a ``ConnectionError``, as a closed HTTP socket is."""

    __slots__ = ("context",)

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self.context = context

    async def write(self, data: bytes) -> None:
        if self.context.done():
            raise ConnectionError("the gRPC call has ended")
        try:
            await self.context.write(data)
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, RuntimeError) as exc:
            raise ConnectionError(f"the gRPC call has ended: {exc}") from None


def read_inputs(req: Any) -> dict[str, Any]:
    """A ``ModelInferRequest``'s inputs (raw contents): BYTES as str, numbers as Python's."""
    out: dict[str, Any] = {}
    for tensor, raw in zip(req.inputs, req.raw_input_contents):
        if tensor.datatype == "BYTES":
            (size,) = struct.unpack_from("<I", raw)
            out[tensor.name] = raw[4 : 4 + size].decode("utf-8", "replace")
        elif tensor.datatype in _UNPACK:
            out[tensor.name] = struct.unpack_from(_UNPACK[tensor.datatype], raw)[0]
    return out


def completions_body(fields: dict[str, Any]) -> dict[str, Any]:
    """The completions request the HTTP server reads for the same generate fields."""
    body: dict[str, Any] = {"prompt": fields.get("text_input"), "stream": True}
    if "max_tokens" in fields:
        body["max_tokens"] = fields["max_tokens"]
    if "min_length" in fields:
        body["min_tokens"] = fields["min_length"]
    sampling = fields.get("sampling_parameters")
    if sampling:
        try:
            sp = json.loads(sampling)
        except ValueError:
            raise BadRequest("sampling_parameters is not JSON") from None
        body.update({k: sp[k] for k in ("max_tokens", "min_tokens", "ignore_eos") if k in sp})
    return body


class GrpcFrontend:
    """``GRPCInferenceService`` for one ``SimServer``: its engine, its log, one model."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim  # the SimServer (which imports this module: not imported back)
        self.model = sim.config.served_model_name
        self.server: Any = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: a free port); the port it listens on."""
        self.server = grpc.aio.server(options=[("grpc.max_concurrent_streams", 4096)])
        unary = {
            "ServerLive": (self.live, pb.ServerLiveRequest),
            "ServerReady": (self.ready, pb.ServerReadyRequest),
            "ServerMetadata": (self.metadata, pb.ServerMetadataRequest),
            "ModelReady": (self.model_ready, pb.ModelReadyRequest),
            "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest),
            "RepositoryIndex": (self.index, pb.RepositoryIndexRequest),
        }
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=lambda m: m.SerializeToString()
            )
            for name, (fn, req) in unary.items()
        }
        handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
            self.stream_infer, request_deserializer=pb.ModelInferRequest.FromString
        )
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        bound: int = self.server.add_insecure_port(f"{host}:{port}")
        await self.server.start()
        return bound

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)

    async def stream_infer(self, requests: Any, context: grpc.aio.ServicerContext) -> None:
        """Each request of the call in turn (loadgen sends one a call), through the engine."""
        async for req in requests:
            await self.generate(req, context)

    async def generate(self, req: Any, context: grpc.aio.ServicerContext) -> None:
        sim = self.sim
        arrival = time.perf_counter_ns()
        rid = sim.new_id("triton")
        encoder = GrpcEncoder(rid, self.model)
        if req.model_name != self.model:
            msg = f"Request for unknown model: '{req.model_name}' is not found"
            await context.write(pb.ModelStreamInferResponse(error_message=msg).SerializeToString())
            return
        fields = read_inputs(req)
        unexpected = sorted(set(fields) - {name for name, _ in INPUTS})
        if unexpected:  # as Triton refuses an input the model does not declare
            msg = f"unexpected inference input '{unexpected[0]}' for model '{req.model_name}'"
            await context.write(pb.ModelStreamInferResponse(error_message=msg).SerializeToString())
            return
        try:
            st = parse_request(completions_body(fields), False, sim.config, rid, sim.created)
        except BadRequest as exc:
            await context.write(pb.ModelStreamInferResponse(error_message=exc.message).SerializeToString())
            return
        st.arrival_ns = arrival
        st.endpoint = "triton_grpc"
        st.encoder = encoder
        st.response = CallWriter(context)
        await sim.run(st)

    async def live(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ready(
        self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def metadata(
        self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="triton", version=VERSION, extensions=["loadgen-sim"])

    async def model_ready(
        self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=request.name == self.model)

    async def index(
        self, request: pb.RepositoryIndexRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepositoryIndexResponse:
        index = pb.RepositoryIndexResponse()
        index.models.add(name=self.model, version="1", state="READY")
        return index

    async def model_metadata(
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        if request.name != self.model:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.name}'")
        meta = pb.ModelMetadataResponse(name=self.model, versions=["1"], platform="ensemble")
        for name, datatype in INPUTS:
            meta.inputs.add(name=name, datatype=datatype, shape=[-1, 1])
        meta.outputs.add(name="text_output", datatype="BYTES", shape=[-1, -1])
        return meta
