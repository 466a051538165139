"""Deterministic synthetic prompts of a requested token length.

Every prompt opens with a prefix unique to its request index: servers with prefix caching would
otherwise serve the shared opening from cache and report a TTFT that no real user sees. A shared
system prompt, when asked for, is deliberately identical across requests, as in production.

Without a tokenizer, lengths are approximate: prompts are built from common short English words
that are a single token after a space in the Llama, GPT (cl100k/o200k) and Qwen vocabularies,
so n words is close to n tokens (chat templates and a model's BOS add a few more).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from loadgen.errors import LoadgenError

WORDS: tuple[str, ...] = tuple(  # a word list is data: one string, split
    "the of and to in is that for it as was with be by on not he this are or his from at which but "
    "have an had they you were their one all we can her has there been if more when will would who so "
    "no time people year way day man thing life world school state family group country problem hand "
    "part place case week company system program question work number night point home water room "
    "mother area money story fact month lot right study book eye job word business side kind head "
    "house service friend father power hour game line end member law car city name team minute idea "
    "body back face level office door health person art war history party result change morning "
    "reason girl moment air force open good new first last long great little own other old big high "
    "small large next early young important few public bad same able".split()
)

_POOL = 4096  # distinct pool positions a prompt may start from
_SPREAD = 2654435761  # Knuth's multiplicative hash spreads consecutive ids over the pool
_BLOCK_SPREAD = 40503  # a different spread for shared blocks, so they start elsewhere in the pool


class EncodingLike(Protocol):
    """What we need of a ``tokenizers.Encoding``."""

    @property
    def ids(self) -> list[int]: ...


class TokenizerLike(Protocol):
    """What we need of a ``tokenizers.Tokenizer`` (``add_special_tokens`` is passed by name)."""

    def encode(self, sequence: str, *, add_special_tokens: bool = ...) -> EncodingLike: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


TOKENIZER_FILE = "tokenizer.json"


class MissingExtra(LoadgenError, ImportError):
    """An optional package a setting needs is not installed (the message names the extra)."""


def tokenizer_file(path: str | Path) -> Path:
    """The ``tokenizer.json`` that ``path`` names: the file itself, or the one in a folder."""
    p = Path(path)
    return p / TOKENIZER_FILE if p.is_dir() else p


def require_tokenizers() -> None:
    """Raise ``MissingExtra`` (one line, naming the extra) unless ``tokenizers`` imports."""
    try:
        import tokenizers  # noqa: F401 - only whether it imports
    except ImportError:
        raise MissingExtra(
            "workload.prompt.tokenizer (--tokenizer) needs the 'tokenizers' package: "
            "pip install 'loadgen[tokenizer]'"
        ) from None


def load_tokenizer(path: str | Path) -> TokenizerLike:
    """Load a local ``tokenizer.json``, or the one in the folder ``path`` names (needs the
    optional ``tokenizers`` package: ``MissingExtra`` without it)."""
    require_tokenizers()
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_file(path)))


def chat_messages(user: str, system: str | None = None) -> list[dict[str, str]]:
    """OpenAI chat messages: an optional system message, then the user's text."""
    head = [{"role": "system", "content": system}] if system else []
    return head + [{"role": "user", "content": user}]


class TextPrompts:
    """Approximate-length text: n words ~ n tokens, sliced from one precomputed string."""

    approximate = True
    prefix_words = 4  # base-len(WORDS) digits of the request index: unique for 600M requests

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng([seed, 4])
        self._pool = np.asarray(WORDS, dtype=object)[rng.integers(0, len(WORDS), _POOL)]
        self._text = ""
        self._offsets = np.zeros(1, dtype=np.int64)
        self._grow(2 * _POOL)

    def _grow(self, words: int) -> None:
        # The pool repeated end to end, each word stored as " word", with character offsets,
        # so a prompt of any length is one string slice (a memcpy), not a join of n words.
        copies = -(-words // _POOL)
        pool = np.tile(self._pool, copies)
        self._text = "".join(" " + w for w in pool)
        self._offsets = np.concatenate(([0], np.cumsum([len(w) + 1 for w in pool])))

    def _slice(self, start: int, words: int) -> str:
        if start + words >= len(self._offsets):
            self._grow(start + words + _POOL)
        return self._text[self._offsets[start] : self._offsets[start + words]]

    @staticmethod
    def prefix(i: int) -> str:
        """Words spelling ``i`` in base len(WORDS): unique per request, a few tokens long."""
        digits = []
        for _ in range(TextPrompts.prefix_words):
            i, d = divmod(i, len(WORDS))
            digits.append(WORDS[d])
        return " ".join(digits).capitalize()

    def build(self, i: int, n: int) -> tuple[str, int]:
        """(text, approximate token count): unique prefix, then max(0, n - prefix) pool words."""
        body = max(0, n - self.prefix_words)
        return self.prefix(i) + self._slice((i * _SPREAD) % _POOL, body), self.prefix_words + body

    def system(self, n: int) -> tuple[str, int]:
        return self._slice(0, n).lstrip(), n

    def block(self, key: int, n: int) -> tuple[str, int]:
        """n words shared by everything that names ``key`` (a prefix group, a trace's hash id):
        the key spelled out, then pool words from a place of its own, so two keys' blocks
        differ from their first words on (a prefix cache tells them apart at once)."""
        body = max(0, n - self.prefix_words)
        head = self.prefix(key)
        if n < self.prefix_words:
            return " ".join(head.split()[:n]), n
        return head + self._slice((key * _BLOCK_SPREAD + 11) % _POOL, body), n


class TokenIdPrompts:
    """Exact-length token-id prompts with ids in [low, vocab_size).

    The default range suits the tiny 2048-token test model; against a real model pass its vocab
    size (ids far below it are ordinary word pieces in every common vocabulary).
    """

    approximate = False

    def __init__(self, seed: int = 0, vocab_size: int = 2000, low: int = 100):
        if vocab_size - low < 2:
            raise ValueError(f"need at least two ids in [low, vocab_size) = [{low}, {vocab_size})")
        self.low, self.span = low, vocab_size - low
        rng = np.random.default_rng([seed, 4])
        self._base = rng.integers(low, vocab_size, size=_POOL, dtype=np.int64).tolist()
        self._pool = self._base * 2

    def _ids(self, start: int, n: int) -> list[int]:
        # A list slice copies pointers to shared small ints: ~20x faster than ndarray.tolist().
        if start + n > len(self._pool):
            self._pool = self._base * (-(-(start + n) // _POOL) + 1)
        return self._pool[start : start + n]

    def build(self, i: int, n: int) -> tuple[list[int], int]:
        """(ids, n): the first two ids spell ``i`` in base ``span``, so openings never repeat."""
        ids = self._ids((i * _SPREAD) % _POOL, max(0, n - 2))
        ids[:0] = [self.low + i % self.span, self.low + (i // self.span) % self.span][:n]
        return ids, n

    def system(self, n: int) -> tuple[list[int], int]:
        return self._ids(0, n), n

    def block(self, key: int, n: int) -> tuple[list[int], int]:
        """n ids shared by everything that names ``key``: two ids spelling it, then pool ids."""
        ids = self._ids((key * _BLOCK_SPREAD + 11) % _POOL, max(0, n - 2))
        ids[:0] = [self.low + key % self.span, self.low + (key // self.span) % self.span][:n]
        return ids, n


class TokenizerPrompts:
    """Text whose encoding (without special tokens) has exactly n tokens under a tokenizer."""

    approximate = False

    def __init__(self, tokenizer: TokenizerLike, seed: int = 0):
        self.tokenizer = tokenizer
        self._text = TextPrompts(seed)

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def _exact(self, candidate: str, n: int) -> tuple[str, int]:
        ids = self.tokenizer.encode(candidate, add_special_tokens=False).ids
        take, text, got = n, candidate, len(ids)
        # Decoding then re-encoding can merge or split pieces at the cut; nudge the cut a few
        # times, and if it never lands exactly, report the realised count rather than lie.
        for _ in range(8):
            text = self.tokenizer.decode(ids[:take])
            got = self.count(text)
            if got == n or take > len(ids):
                break
            take = max(1, take + n - got)
        return text, got

    def build(self, i: int, n: int) -> tuple[str, int]:
        candidate, _ = self._text.build(i, n + n // 2 + 16)
        return self._exact(candidate, n)

    def system(self, n: int) -> tuple[str, int]:
        candidate, _ = self._text.system(n + n // 2 + 16)
        return self._exact(candidate, n)

    def block(self, key: int, n: int) -> tuple[str, int]:
        candidate, _ = self._text.block(key, n + n // 2 + 16)
        return self._exact(candidate, n)
