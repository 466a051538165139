"""loadgen against Hugging Face's ``transformers serve`` (scripts/transformers_engine.py: its own
venv, ``--continuous-batching --device cpu``, the tiny model of scripts/real_engines.py).

What this server does differently from vLLM (measured with curl against transformers 5.25.0):

- No stream ends with ``data: [DONE]``. A chat or completions stream ends with its
  ``finish_reason`` chunk, then the usage chunk (``choices: []``) when
  ``stream_options.include_usage`` was sent, then the body ends; a Responses stream ends with
  ``response.completed`` (its only terminator, as the API defines it). loadgen takes such a
  chat/completions stream as whole (``stream_end`` "no_terminator").
- Fields it does not know are refused before anything is generated: ``ignore_eos``, ``min_tokens``,
  ``top_k`` (and ``repetition_penalty``) answer 422 ``{"detail": "Unexpected fields in the request:
  {'ignore_eos'}"}``. ``target.ignore_eos: auto`` (the default) drops the field after the
  preflight request is refused for it, and says so on the console. The random model can never
  sample its end-of-sequence token, so every answer is max_tokens long all the same.
- It serves one model under its path (``/v1/models`` id ``/…/tiny-llama``, ``owned_by: local``),
  with no ``max_model_len``; a prompt of 2,048 tokens or more is refused with 400 ``The prompt
  has N tokens, but the model takes at most 2048, prompt and answer (`--max-model-len`).``

Bounded: 27 short runs (6-24 requests of 64 / 32 tokens) and the shipped chat profile (200
requests), about 2 minutes after the server is up (~8 s): 105 s measured, 80 of them the profile.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.backends.transports import TRANSPORTS
from loadgen.runner import api

from .conftest import profile_maker

pytestmark = pytest.mark.integration

ENDPOINTS = ("chat", "completions", "responses")
# The server's refusal of a prompt past its context (the only failure the chat profile may see:
# /v1/models gives no max_model_len to fit prompts to, and this tokenizer's tokens are short).
OVER_CONTEXT = re.compile(r"The prompt has (\d+) tokens, but the model takes at most 2048")


def run(profile):
    """Run a profile to completion in a fresh event loop, as `loadgen run` does."""
    return asyncio.run(api.run_async(profile))


@pytest.fixture
def tfserve_profile(tfserve, tmp_path: Path):
    """64 / 32-token requests against transformers serve, no warm-up, ignore_eos left at its
    default (auto)."""
    return profile_maker(
        tfserve,
        tmp_path,
        load__warmup_requests=0,
        workload__input_tokens=64,
        workload__output_tokens=32,
    )


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
@pytest.mark.parametrize("concurrency", [1, 4, 8])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_every_request_ok_and_counted_by_the_server(tfserve_profile, endpoint, concurrency, transport):
    """Chat, completions and Responses at c=1, 4 and 8 on every transport: 0 failures, and each
    record's output tokens are the server's usage, which is max_tokens (the model never ends on
    its own); the chat and completions streams, without [DONE], end after their finish."""
    n = 6 if concurrency == 1 else 3 * concurrency
    res = run(
        tfserve_profile(
            target__endpoint=endpoint,
            target__transport=transport,
            load__concurrency=concurrency,
            workload__num_requests=n,
        )
    )
    c = res.summary["counts"]
    assert (c["sent"], c["ok"], c["failed"]) == (n, n, 0), c
    for r in res.records:
        assert r.ok and r.error_class is None, (r.error_class, r.error_message)
        assert r.response_id
        assert (r.token_source, r.output_tokens) == ("usage", r.requested_output_tokens), r
        assert r.prompt_tokens_source == "usage" and r.prompt_tokens > 0
        # One event per token, or fewer: the server joins the texts of a stream that fell behind.
        assert 1 <= len(r.chunk_times_ns) <= r.output_tokens
        if endpoint == "responses":
            assert r.stream_end == "terminator"  # response.completed
        else:
            assert (r.finish_reason, r.stream_end) == ("length", "no_terminator")
    print(f"\n{endpoint} c={concurrency} {transport}: ok {c['ok']}/{c['sent']}")


def test_the_shipped_chat_profile_runs_as_is(tfserve, tmp_path: Path):
    """`loadgen run chat --url ...` with nothing else: exit 0, the console says ignore_eos was
    refused by the server and dropped, and every request ok but those whose prompt the server
    refused as past its 2,048-token context (the profile's lognormal prompts reach 4,096)."""
    out = tmp_path / "reports"
    env = dict(os.environ, COLUMNS="200")
    cmd = [sys.executable, "-m", "loadgen", "run", "chat", "--url", tfserve.url, "--out", str(out)]
    proc = subprocess.run(
        [*cmd, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-4000:]
    # The preflight's line (stderr, before the run) and the summary's note (measured: "preflight:
    # the server does not take ignore_eos: ... it said: Unexpected fields in the request:
    # {'ignore_eos'}" and "note    the server does not take ignore_eos: ...").
    notes = [line for line in console.splitlines() if "ignore_eos" in line]
    assert notes, console[-4000:]
    print("\n" + "\n".join(notes))
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    c = summary["counts"]
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    failed = [r for r in rows if not r["ok"]]
    for r in failed:
        m = OVER_CONTEXT.search(str(r["error_message"]))
        assert r["http_status"] == 400 and m and int(m.group(1)) >= 2048, r
    ok = [r for r in rows if r["ok"]]
    assert len(ok) + len(failed) == len(rows) == c["sent"] + c["warmup"]
    assert len(failed) <= 0.1 * len(rows), c
    for r in ok:
        assert r["token_source"] == "usage" and r["output_tokens"] == r["requested_output_tokens"], r
        assert r["stream_end"] == "no_terminator"
    print(f"chat profile: ok {len(ok)}/{len(rows)}, refused past the context {len(failed)}")
