"""A server's command line as the experiment records it: secret options masked, settings kept."""

from __future__ import annotations

from loadgen.experiment.serve import secret_values
from loadgen.redact import redact_argv

ARGV = [
    "vllm",
    "serve",
    "m",
    "--api-key",
    "sk-1234567890",
    "--port",
    "8000",
    "HF_TOKEN=hf_abcdefgh",
    "--max-num-batched-tokens",
    "8192",
    "--auth=tok-zzzzzzzz",
]


def test_secret_options_and_assignments_are_masked_and_settings_kept():
    """--api-key's value and HF_TOKEN's are masked; --max-num-batched-tokens (tokens, plural) is
    a setting and keeps its value; --auth=... masks after the sign."""
    assert redact_argv(ARGV) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        "***",
        "--port",
        "8000",
        "HF_TOKEN=***",
        "--max-num-batched-tokens",
        "8192",
        "--auth=***",
    ]


def test_the_masked_values_are_what_the_scrubber_must_catch():
    assert secret_values(ARGV) == ["sk-1234567890", "hf_abcdefgh", "tok-zzzzzzzz"]
