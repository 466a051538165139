"""``triton_grpc`` without the optional extra ``loadgen[grpc]``: loadgen imports and lists the
protocol, and a run says what to install; and the KServe tensors the adapter sends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loadgen.backends import kserve, registry
from loadgen.backends.base import ProbeError
from loadgen.backends.transports.base import TransportOptions
from loadgen.backends.triton_grpc import TritonGrpcBackend

OPTS = TransportOptions(
    base_url="grpc://triton.example:8001",
    headers={"Authorization": "Bearer k"},
    max_connections=None,
    connect_timeout_s=1,
    read_timeout_s=1,
)


def test_loadgen_imports_and_lists_the_protocol_without_grpc():
    """With grpc and tritonclient unimportable, the backends import and register triton_grpc."""
    code = (
        "import sys; sys.modules['grpc'] = None; sys.modules['tritonclient'] = None\n"
        "from loadgen.backends import registry\n"
        "print(registry.backend('triton_grpc').wire)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, "grpc"), out.stderr


def test_a_run_without_the_extra_says_install_loadgen_grpc(monkeypatch):
    """Opening the transport without the stubs is a ProbeError naming the URL and the fix."""
    monkeypatch.setitem(sys.modules, "tritonclient", None)
    monkeypatch.setitem(sys.modules, "tritonclient.grpc", None)
    kserve.pb.cache_clear()
    try:
        with pytest.raises(ProbeError) as err:
            TritonGrpcBackend.open_transport("httptools", OPTS)
    finally:
        kserve.pb.cache_clear()
    msg = str(err.value)
    assert "grpc://triton.example:8001" in msg and "install loadgen[grpc]" in msg


def test_the_protocol_takes_grpc_urls_and_brings_its_own_transport():
    cls = registry.backend("triton_grpc")
    assert (cls.wire, cls.URL_SCHEMES[:2], registry.backend("chat").wire) == (
        "grpc",
        ("grpc", "grpcs"),
        "http",
    )


class TestInferRequest:
    def test_declared_inputs_get_their_types_the_rest_go_as_parameters(self):
        """max_tokens INT32 [1,1] raw little-endian, text_input BYTES length-prefixed, an
        undeclared field a request parameter."""
        pytest.importorskip("tritonclient.grpc")
        inputs = {"text_input": ("BYTES", 2), "max_tokens": ("INT32", 2), "stream": ("BOOL", 2)}
        fields = {"text_input": "hi there", "max_tokens": 7, "stream": True, "bad_words": ""}
        raw = kserve.infer_request("ensemble", fields, inputs, {"triton_enable_empty_final_response": True})
        req = kserve.pb().ModelInferRequest.FromString(raw)
        assert [(t.name, t.datatype, list(t.shape)) for t in req.inputs] == [
            ("text_input", "BYTES", [1, 1]),
            ("max_tokens", "INT32", [1, 1]),
            ("stream", "BOOL", [1, 1]),
        ]
        assert list(req.raw_input_contents) == [b"\x08\x00\x00\x00hi there", b"\x07\x00\x00\x00", b"\x01"]
        assert req.parameters["bad_words"].string_param == ""
        assert req.parameters["triton_enable_empty_final_response"].bool_param is True

    def test_the_vllm_backend_takes_lengths_in_sampling_parameters(self):
        """A model with a sampling_parameters input gets max_tokens and min_length (as vLLM's
        min_tokens) in that JSON."""
        pytest.importorskip("tritonclient.grpc")
        inputs = {"text_input": ("BYTES", 1), "stream": ("BOOL", 1), "sampling_parameters": ("BYTES", 1)}
        fields = {"text_input": "x", "max_tokens": 5, "stream": True, "min_length": 5}
        req = kserve.pb().ModelInferRequest.FromString(kserve.infer_request("vllm_model", fields, inputs, {}))
        assert [t.name for t in req.inputs] == ["text_input", "stream", "sampling_parameters"]
        assert kserve.strings(req.raw_input_contents[2]) == [b'{"max_tokens": 5, "min_tokens": 5}']
