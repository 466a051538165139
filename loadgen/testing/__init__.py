"""Helpers users and loadgen's own tests import: a scripted streaming server speaking the OpenAI
API, Triton's generate extension and SGLang's /generate, in its own process and logging on the
client's clock (``StreamServer``)."""

from loadgen.testing.server import StreamServer, make_app, serve, toy_token_count

__all__ = ["StreamServer", "make_app", "serve", "toy_token_count"]
