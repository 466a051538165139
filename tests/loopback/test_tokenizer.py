"""Exact prompt lengths with a real local tokenizer.json (the `tokenizers` package, test extra).

The tokenizer is trained here, in a second, on generated text: nothing comes from a model hub.
"""

from __future__ import annotations

import pytest

tokenizers = pytest.importorskip("tokenizers")

from loadgen.config import load_profile  # noqa: E402
from loadgen.workload import Workload  # noqa: E402

from helpers import run  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    """A 600-token byte-level BPE tokenizer trained on the synthetic prompt vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from loadgen.workload.prompts import WORDS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40)) for i in range(400)]
    lines += [f"Request {i} number {i * 31} of {i * 7}" for i in range(400)]
    tok.train_from_iterator(
        lines,
        trainers.BpeTrainer(
            vocab_size=600, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


class TestTokenizerPrompts:
    @pytest.mark.parametrize("n", [1, 7, 64, 500, 3000])
    def test_text_prompts_encode_to_exactly_the_target(self, tokenizer_path, n):
        """With a tokenizer, every text prompt re-encodes to exactly its target length."""
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer_path))
        p = load_profile(
            None,
            overrides={
                "workload.num_requests": 20,
                "load.concurrency": 1,
                "workload.input_tokens": n,
                "workload.prompt.tokenizer": str(tokenizer_path),
            },
        )
        w = Workload(p.workload, "completions", "text", p.workload.prompt.tokenizer)
        assert w.approximate_prompt_lengths is False
        for i in range(20):
            spec = w.request(i)
            assert len(tok.encode(spec.prompt, add_special_tokens=False).ids) == n == spec.prompt_tokens

    def test_a_run_with_a_tokenizer_counts_chunk_tokens_with_it(self, server, make_profile, tokenizer_path):
        """Without per-chunk usage, a supplied tokenizer counts each chunk's tokens, and the
        result says the lengths are exact."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                workload__output_tokens=6,
                workload__prompt__tokenizer=str(tokenizer_path),
            )
        )
        assert res.summary["conditions"]["prompt_lengths_approximate"] is False
        for r in res.records:
            assert r.token_source == "tokenizer"
            assert len(r.chunk_tokens) == 6 and all(n >= 1 for n in r.chunk_tokens)
