"""Protocol adapters: one wire protocol each, over the HTTP transports in ``transports/``.

``base.StreamingBackend`` sends a request once for every protocol (body -> JSON -> stream
consumer -> transport, with the timeout and error handling of ``send.stream_request``); an
adapter says only what its protocol's bytes are. ``registry.PROTOCOLS`` lists them by
``target.endpoint`` name; importing this package imports every adapter, so the registry is full
for whoever asks it: the profile (valid endpoints, which take token ids), the CLI (``--endpoint``
choices and help), the runner (probe, then ``for_target``), prompt fitting (``/tokenize``) and
the report (rows of what the server said).

Adding a protocol = one new module here plus its tests, nothing else:

1. Subclass ``StreamingBackend`` and decorate it with ``@registry.register``. Declare ``name``
   (its ``target.endpoint`` value), ``description`` (help text), ``PATH`` (``{model}`` is
   replaced by the model), ``STREAM`` (an ``SSEResponse`` subclass whose ``on_events`` and
   ``on_end`` read its events), ``body(spec)`` and ``probe(transport, url, model)`` returning a
   ``ProbeResult`` (what the server said, the model, its ``ServerIdentity``), plus what applies
   of ``token_ids``/``text_only``, ``messages``, ``server_tokenize``, ``needs_model``,
   ``engine``, ``SOURCES`` and ``options()`` (see ``StreamingBackend``).
2. Import the module below (where it goes is where it is listed).
   A protocol that does not go over HTTP (``triton_grpc``) also sets ``wire`` and brings its
   own transport (``open_transport``, ``payload``; see ``StreamingBackend``).
3. Test it against a scripted server (``loadgen.testing``), as tests/test_native_protocols.py
   does for Triton and SGLang.
"""

from loadgen.backends import registry

# Registration order is the order the profile's errors and the CLI list the choices in.
# isort: off
from loadgen.backends import openai  # chat, completions
from loadgen.backends import triton  # triton_generate
from loadgen.backends import sglang  # sglang_generate
from loadgen.backends import responses  # responses (OpenAI's Responses API)
from loadgen.backends import messages  # messages (Anthropic's Messages API)
from loadgen.backends import triton_grpc  # triton_grpc (Triton's KServe v2 gRPC stream)
from loadgen.backends import pooling  # embeddings, rerank (answered whole, not streamed)
# isort: on

__all__ = ["messages", "openai", "pooling", "registry", "responses", "sglang", "triton", "triton_grpc"]
