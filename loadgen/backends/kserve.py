"""KServe v2 tensors over gRPC: a generate request's fields as a ``ModelInferRequest``, and the
outputs of a ``ModelInferResponse`` a stream consumer reads.

The messages are the generated stubs of ``tritonclient[grpc]`` (``service_pb2``, the extra
``loadgen[grpc]``), imported on first use so that loadgen imports without the extra. Tensors
go as ``raw_input_contents`` (little-endian; a BYTES element is a 4-byte length and its bytes),
as Triton's own clients send them. Which field becomes what follows the model's metadata, as
Triton's HTTP generate extension decides it: a field the model declares as an input is that
input (of the declared type); a model with a ``sampling_parameters`` input (Triton's vLLM
backend) takes ``max_tokens``, ``min_length`` (as vLLM's ``min_tokens``) and ``ignore_eos`` in
that JSON; every other field is a request parameter. Without metadata every field is an input.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from collections.abc import Mapping
from typing import Any

SAMPLING_INPUT = "sampling_parameters"
_SAMPLING_NAMES = {"max_tokens": "max_tokens", "min_length": "min_tokens", "ignore_eos": "ignore_eos"}
_PACK = {"BOOL": "<?", "INT8": "<b", "INT16": "<h", "INT32": "<i", "INT64": "<q", "UINT8": "<B"}
_PACK |= {"UINT16": "<H", "UINT32": "<I", "UINT64": "<Q", "FP32": "<f", "FP64": "<d"}
_COUNTS = ("INT32", "INT64", "UINT32", "UINT64")


def quiet_grpc() -> None:
    """grpc's C core logs connection events (a GOAWAY at shutdown) at INFO on stderr, into a
    run's console; only its errors belong there. Read when grpc is first imported."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


@functools.cache
def pb() -> Any:
    """``tritonclient.grpc.service_pb2`` (ImportError without the ``loadgen[grpc]`` extra)."""
    quiet_grpc()
    from tritonclient.grpc import service_pb2

    return service_pb2


def datatype_of(value: Any) -> str:
    """The tensor type of a field the model's metadata does not type."""
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, int):
        return "INT32"
    if isinstance(value, float):
        return "FP32"
    return "BYTES"


def raw_tensor(datatype: str, value: Any) -> bytes:
    """One element of ``datatype`` as raw little-endian bytes."""
    if datatype == "BYTES":
        if not isinstance(value, (str, bytes)):
            value = json.dumps(value, separators=(",", ":"))
        data = value.encode() if isinstance(value, str) else value
        return struct.pack("<I", len(data)) + data
    return struct.pack(_PACK[datatype], value)


def set_parameter(param: Any, value: Any) -> None:
    """A request parameter of ``value``'s type (a list or object as its JSON string)."""
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    else:
        param.string_param = value if isinstance(value, str) else json.dumps(value)


def infer_request(
    model: str,
    fields: Mapping[str, Any],
    inputs: Mapping[str, tuple[str, int]] | None,
    parameters: Mapping[str, Any],
) -> bytes:
    """A serialized ``ModelInferRequest`` for ``model``: ``fields`` placed as the module doc
    says, ``inputs`` the model's declared inputs (name -> datatype, number of dimensions; None:
    unknown), ``parameters`` the request's own (``triton_enable_empty_final_response``)."""
    req = pb().ModelInferRequest(model_name=model)
    sampling: dict[str, Any] = {}
    extra: dict[str, Any] = dict(parameters)
    for name, value in fields.items():
        declared = inputs.get(name) if inputs is not None else (datatype_of(value), 2)
        if declared is not None:
            datatype, ndim = declared
            tensor = req.inputs.add(name=name, datatype=datatype)
            tensor.shape.extend([1] * max(1, ndim))
            req.raw_input_contents.append(raw_tensor(datatype, value))
        elif inputs is not None and SAMPLING_INPUT in inputs and name in _SAMPLING_NAMES:
            sampling[_SAMPLING_NAMES[name]] = value
        else:
            extra[name] = value
    if sampling and inputs is not None:
        datatype, ndim = inputs[SAMPLING_INPUT]
        tensor = req.inputs.add(name=SAMPLING_INPUT, datatype=datatype)
        tensor.shape.extend([1] * max(1, ndim))
        req.raw_input_contents.append(raw_tensor(datatype, json.dumps(sampling)))
    for name, value in extra.items():
        set_parameter(req.parameters[name], value)
    return req.SerializeToString()


def strings(raw: bytes) -> list[bytes]:
    """The elements of a raw BYTES tensor."""
    out, i, n = [], 0, len(raw)
    while i + 4 <= n:
        (size,) = struct.unpack_from("<I", raw, i)
        out.append(raw[i + 4 : i + 4 + size])
        i += 4 + size
    if i != n:
        raise ValueError(f"a BYTES tensor's lengths overrun its {n} bytes")
    return out


def output_text(resp: Any, name: str) -> str | None:
    """Output ``name`` of a ``ModelInferResponse`` as text (its elements joined); None when
    the response has no such output."""
    for i, out in enumerate(resp.outputs):
        if out.name == name:
            if i < len(resp.raw_output_contents):
                parts = strings(resp.raw_output_contents[i])
            else:
                parts = list(out.contents.bytes_contents)
            return b"".join(parts).decode("utf-8", "replace")
    return None


def output_count(resp: Any, name: str) -> int | None:
    """Integer output ``name`` (one element: ``num_output_tokens``), or None."""
    for i, out in enumerate(resp.outputs):
        if out.name == name and out.datatype in _COUNTS:
            if i < len(resp.raw_output_contents):
                raw = resp.raw_output_contents[i]
                fmt = _PACK[out.datatype]
                return int(struct.unpack_from(fmt, raw)[0]) if len(raw) >= struct.calcsize(fmt) else None
            c = out.contents
            values = list(c.int_contents) or list(c.int64_contents) or list(c.uint_contents)
            values = values or list(c.uint64_contents)
            return int(values[0]) if values else None
    return None


def final_flag(resp: Any) -> bool:
    """Triton's ``triton_final_response`` parameter: this is the request's last response."""
    params = resp.parameters
    return "triton_final_response" in params and bool(params["triton_final_response"].bool_param)


def model_inputs(meta: Any) -> dict[str, tuple[str, int]]:
    """A ``ModelMetadataResponse``'s inputs: name -> (datatype, number of dimensions)."""
    return {t.name: (t.datatype, len(t.shape)) for t in meta.inputs}


def metadata_json(meta: Any) -> dict[str, Any]:
    """A ``ModelMetadataResponse`` as the HTTP ``/v2/models/{model}`` JSON says it."""

    def tensors(ts: Any) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in ts]

    return {
        "name": meta.name,
        "versions": list(meta.versions),
        "platform": meta.platform,
        "inputs": tensors(meta.inputs),
        "outputs": tensors(meta.outputs),
    }
