"""Triton over gRPC: KServe v2 ``ModelStreamInfer``, the bidirectional stream of decoupled models.

What TensorRT-LLM's ``ensemble`` / ``tensorrt_llm_bls`` models and Triton's vLLM backend serve
on Triton's gRPC port (8001), as Triton's own ``tritonclient.grpc`` speaks it:

- Request: one ``ModelInferRequest`` per call, the fields of the HTTP generate body
  (``triton.generate_fields``: ``text_input`` BYTES, ``max_tokens`` INT32, ``stream`` BOOL,
  ``min_length`` for ``ignore_eos``, ``target.extra_body``'s) as the model's inputs where it
  declares them (``kserve.py``: ``sampling_parameters`` for the vLLM backend, request parameters
  otherwise), with ``triton_enable_empty_final_response`` so the end is always flagged.
- Responses: one ``ModelStreamInferResponse`` per model response, output ``text_output`` with
  the newly decoded text; the last one carries the parameter ``triton_final_response: true``.
  ``error_message`` is an in-stream error (``server_error_event``); a stream that ends without
  the flag is ``no_done``; a status other than OK is the transport's to classify.

Tokens are counted as the HTTP generate backend counts them (``triton.take_response``).
The transport is the protocol's own (``wire = "grpc"``: ``transports/grpc_channel.py``), a
channel to ``target.url`` (``grpc://host:port``; ``http://`` with the gRPC port works too), the
API key as ``authorization: Bearer`` metadata. The extra ``loadgen[grpc]`` brings ``grpcio`` and
``tritonclient[grpc]``; without it this module still imports, and a run says what to install.
"""

from __future__ import annotations

from typing import Any, ClassVar

from loadgen import records as R
from loadgen.backends import kserve
from loadgen.backends.base import ProbeError, ProbeResult
from loadgen.backends.registry import register
from loadgen.backends.stream import SSEResponse, fail
from loadgen.backends.transports.base import Transport, TransportOptions
from loadgen.backends.transports.grpc_channel import GrpcTransport
from loadgen.backends.triton import TritonBackend, take_response
from loadgen.redact import redact_url

SERVICE = "/inference.GRPCInferenceService/"
MISSING = "install loadgen[grpc] (pip install 'loadgen[grpc]': grpcio and tritonclient[grpc])"
_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


class _GrpcStream(SSEResponse):
    """Reads ``ModelStreamInferResponse`` messages, one a ``feed``, stamped by the transport."""

    __slots__ = ("continuous", "final")

    def __init__(self, rec: R.RequestRecord, keep_texts: bool) -> None:
        super().__init__(rec, keep_texts)
        self.continuous = False
        self.final = False  # the response flagged triton_final_response arrived

    def head(self, status: int, headers: Any, t_ns: int) -> None:
        """The first message's arrival; gRPC has no HTTP status of its own to record."""
        self.rec.t_first_byte_ns = t_ns
        self.rid = headers.get("x-request-id")

    def feed(self, t: int, raw: bytes) -> bool:
        """One response message; False once the stream is beyond use."""
        self.events += 1
        try:
            return self.on_events(t, [raw])
        except _SHAPE_ERRORS as exc:
            return self.shape_error(t, [raw], exc)

    def on_events(self, t: int, events: list[bytes]) -> bool:
        rec = self.rec
        for raw in events:
            try:
                msg = kserve.pb().ModelStreamInferResponse.FromString(raw)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError: bytes that are no response
                return self.malformed(t, raw)
            if msg.error_message:
                fail(rec, R.SERVER_ERROR_EVENT, msg.error_message[:300], t)
                return False
            if self.final:
                fail(rec, R.MALFORMED, "a response after the one flagged triton_final_response", t)
                return False
            resp = msg.infer_response
            if rec.response_id is None:
                rec.response_id = resp.id or self.rid
            text = kserve.output_text(resp, "text_output") or ""
            n_out = kserve.output_count(resp, "num_output_tokens")
            if take_response(self, t, text, n_out, kserve.output_count(resp, "num_input_tokens")):
                self.continuous = True
            # The request's last response; the server then ends the call (the client half-closed
            # it), and that end is the record's, as an HTTP response's end is.
            self.final = kserve.final_flag(resp)
        return True

    def finish(self, t_end: int) -> None:
        if self.rec.error_class is None and not self.final:
            fail(
                self.rec,
                R.NO_DONE,
                f"the stream ended after {self.events} responses, none flagged triton_final_response",
                t_end,
            )
            return
        super().finish(t_end)

    def on_end(self) -> None:
        self.rec.ok = True
        if self.continuous:
            self.rec.token_source = "continuous_usage"


@register
class TritonGrpcBackend(TritonBackend):
    """One RequestSpec -> one ``ModelStreamInfer`` call -> its RequestRecord."""

    __slots__ = ("inputs",)
    name = "triton_grpc"
    description = "Triton's KServe v2 gRPC ModelStreamInfer (decoupled models), grpc://host:8001"
    PATH = SERVICE + "ModelStreamInfer"
    STREAM = _GrpcStream  # type: ignore[assignment]  # TritonBackend's is the SSE one
    text_only = "Triton's generate inputs take text_input"
    needs_model = False  # RepositoryIndex names the ready models: one is the model to call
    SOURCES = (("version", "ServerMetadata"), ("model_metadata", "ModelMetadata"))
    wire = "grpc"
    URL_SCHEMES: ClassVar[tuple[str, ...]] = ("grpc", "grpcs", "http", "https")
    PARAMETERS: ClassVar[dict[str, Any]] = {"triton_enable_empty_final_response": True}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The model's declared inputs (``ready`` reads them); None: send every field as an input.
        self.inputs: dict[str, tuple[str, int]] | None = None

    @classmethod
    def open_transport(cls, kind: str, opts: TransportOptions) -> Transport:
        """A gRPC channel to ``target.url``, whatever ``target.transport`` says (it names the
        HTTP transports); a ProbeError naming the fix when the extra is not installed."""
        try:
            kserve.pb()
            return GrpcTransport(opts)
        except ImportError as exc:
            raise ProbeError(
                f"target.endpoint {cls.name} ({redact_url(opts.base_url)}) needs gRPC, which is "
                f"not installed ({exc}): {MISSING}"
            ) from None

    async def ready(self) -> None:
        """Read the model's inputs once, before the first request: which fields go as inputs."""
        meta = await _model_metadata(self.transport, self.opts.model)
        self.inputs = kserve.model_inputs(meta)

    def payload(self, spec: R.RequestSpec) -> bytes:
        return kserve.infer_request(self.opts.model, self.body(spec), self.inputs, self.PARAMETERS)

    @classmethod
    async def probe(cls, transport: Transport, url: str, model: str | None) -> ProbeResult:
        """``ServerLive``, ``ServerReady``, ``ServerMetadata`` (name, version, extensions), then
        the model's ``ModelReady`` and ``ModelMetadata``. Without ``model``, the one ready model
        of the server's ``RepositoryIndex`` (an error naming them when there are several)."""
        where = redact_url(url)
        pb = kserve.pb()
        info: dict[str, Any] = {"protocol": cls.name}
        try:
            live = pb.ServerLiveResponse.FromString((await transport.get(SERVICE + "ServerLive"))[2])
            ready = pb.ServerReadyResponse.FromString((await transport.get(SERVICE + "ServerReady"))[2])
        except Exception as exc:  # noqa: BLE001 - any failure here means "cannot reach it"
            error_class, msg = transport.classify(exc)
            raise ProbeError(
                f"cannot reach {where} over gRPC ({error_class}: {msg}); is the server running, "
                "and does target.url name its gRPC port (Triton's default: grpc://host:8001)?"
            ) from None
        if not (live.live and ready.ready):
            raise ProbeError(
                f"{where}: the Triton server is {'not live' if not live.live else 'not ready'} "
                "(still loading models?)"
            )
        got = pb.ServerMetadataResponse.FromString((await transport.get(SERVICE + "ServerMetadata"))[2])
        info["version"] = {"name": got.name, "version": got.version, "extensions": list(got.extensions)}
        if not model:
            model = await _only_model(transport, str(where))
        try:
            req = pb.ModelReadyRequest(name=model).SerializeToString()
            model_ready = pb.ModelReadyResponse.FromString(await _unary(transport, "ModelReady", req)).ready
            meta = await _model_metadata(transport, model) if model_ready else None
        except Exception as exc:  # noqa: BLE001 - an unknown model is an error status
            error_class, msg = transport.classify(exc)
            raise ProbeError(
                f"{where}: Triton has no ready model {model!r} ({error_class}: {msg}); set "
                "target.model to one it serves"
            ) from None
        if meta is None:
            raise ProbeError(
                f"{where}: Triton has no ready model {model!r} (not in its repository, or still "
                "loading); set target.model to one it serves"
            )
        info["model_metadata"] = kserve.metadata_json(meta)
        return ProbeResult(info, model, cls.identify(info))


async def _only_model(transport: Any, where: str) -> str:
    """The one ready model of the server's repository index; a ProbeError naming the choices."""
    pb = kserve.pb()
    hint = "set target.model (--model NAME), e.g. `ensemble` or `tensorrt_llm_bls` for TensorRT-LLM"
    try:
        req = pb.RepositoryIndexRequest(ready=True).SerializeToString()
        index = pb.RepositoryIndexResponse.FromString(await _unary(transport, "RepositoryIndex", req))
    except Exception as exc:  # noqa: BLE001 - a server without the model-repository extension
        error_class, msg = transport.classify(exc)
        raise ProbeError(
            f"{where}: its RepositoryIndex did not answer ({error_class}: {msg}); {hint}"
        ) from None
    names = sorted({m.name for m in index.models})
    if len(names) != 1:
        raise ProbeError(f"{where} serves {len(names)} ready models ({', '.join(names) or 'none'}); {hint}")
    return names[0]


async def _unary(transport: Any, method: str, body: bytes) -> bytes:
    out: bytes = await transport.unary(SERVICE + method, body)
    return out


async def _model_metadata(transport: Any, model: str) -> Any:
    pb = kserve.pb()
    raw = await _unary(transport, "ModelMetadata", pb.ModelMetadataRequest(name=model).SerializeToString())
    return pb.ModelMetadataResponse.FromString(raw)
