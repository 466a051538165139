"""Prompt token counting and the deterministic words the simulator streams.

Counting rule (documented, so a client can predict ``usage.prompt_tokens`` exactly):
- a text prompt counts one token per whitespace-separated word (``len(text.split())``), which
  matches the client's synthetic prompts where one common word is about one token;
- a token-id prompt (a list of ints) counts its length, exactly;
- a chat request counts the words of every message's text content, plus
  ``CHAT_TOKENS_PER_MESSAGE`` per message (role header and end-of-turn markers) plus
  ``CHAT_TOKENS_PER_REQUEST`` (begin-of-text and the assistant header), roughly Llama-3's template.

Token identities (for the prefix cache): the counting rule above, spelled out token by token,
so two prompts share a KV block exactly when their first k * block_size identities are equal. A
text prompt's tokens are its words; a token-id prompt's are its ids; a chat request's are, per
message, ``CHAT_TOKENS_PER_MESSAGE`` marker tokens that depend on its role, then its words, and
then ``CHAT_TOKENS_PER_REQUEST`` closing tokens. Markers are tuples, which no word (a str) or id
(an int) can equal, so a chat prompt never shares a block with a text prompt, and text never with
ids (there is no tokenizer to say when they would agree).

Output text: token i of a request is a word from a fixed vocabulary, chosen by a stride walk
seeded from (config seed, prompt), so the same prompt gives the same text on every run.
Each word carries its leading space, as real BPE tokens do.
"""

from __future__ import annotations

import functools
import math
import random
import zlib
from collections.abc import Callable, Hashable
from typing import Any

import orjson

CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PER_REQUEST = 3

# A word list is data: one string, split (dict.fromkeys drops a repeat, keeping the order).
_VOCAB = tuple(
    dict.fromkeys(
        "the of and to in a is that for it as was with be by on not he this are or his from at which but "
        "have an they you were her she there had been one all we their has would more when will if no out "
        "so said what up its about into than them can only other new some could time these two may then "
        "do first any my now such like our over man me even most made after also did many before must "
        "through back years where much your way well down should because each just those people how too "
        "little state good very make world still own see men work long get here between both life being "
        "under never day same another know while last might us great old year off come since against go "
        "came right used take three himself few house use during without again place around however home "
        "small found thought went say part once general high upon school every does got left number "
        "course war until always away something fact though water less public put think almost hand "
        "enough far took head yet system better set told nothing night end why called find look asked "
        "later knew point next program city business give group toward young days let room side social "
        "given present several order national possible rather second face among form important often "
        "things early white case become large big need four within felt along children saw best ever "
        "least power light thing seemed family want mind country area others done turned open service "
        "certain kind problem began different door thus help sense means whole matter perhaps itself".split()
    )
)
# JSON string literals, ready to splice into an SSE event without per-token encoding.
WORDS_JSON: tuple[bytes, ...] = tuple(orjson.dumps(" " + w) for w in _VOCAB)
WORDS: tuple[str, ...] = tuple(" " + w for w in _VOCAB)
VOCAB_SIZE = len(WORDS)


def count_text(text: str) -> int:
    return len(text.split())


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def count_chat(messages: list[dict[str, Any]]) -> int:
    words = sum(count_text(_message_text(m.get("content"))) for m in messages)
    return words + CHAT_TOKENS_PER_MESSAGE * len(messages) + CHAT_TOKENS_PER_REQUEST


_CHAT_TAIL = tuple(("<|request|>", "", i) for i in range(CHAT_TOKENS_PER_REQUEST))
# The token an empty prompt still holds (its count is max(words, 1)), so identities and count agree.
EMPTY_PROMPT_TOKENS: tuple[Hashable, ...] = (("<|begin_of_text|>", "", 0),)


@functools.lru_cache(maxsize=64)  # roles are few; a client inventing roles cannot grow it
def _marker(role: str) -> tuple[tuple[str, str, int], ...]:
    """A chat message's header tokens, which depend on its role (as a template's do)."""
    return tuple(("<|message|>", role, i) for i in range(CHAT_TOKENS_PER_MESSAGE))


def text_tokens(text: str) -> list[str]:
    """A text prompt's token identities: ``count_text(text)`` of them."""
    return text.split()


def chat_tokens(
    messages: list[dict[str, Any]], media: Callable[[dict[str, Any]], list[Hashable] | None] | None = None
) -> list[Hashable]:
    """A chat request's token identities: ``count_chat(messages)`` of them, and with ``media``
    each image's or clip's, where it stands among the text (``media.py``; None: a text part)."""
    out: list[Hashable] = []
    for m in messages:
        role = m.get("role")
        out += _marker(role if isinstance(role, str) else repr(role))
        content = m.get("content")
        if media is not None and isinstance(content, list):
            for p in content:
                got = media(p) if isinstance(p, dict) else None
                out += _message_text([p]).split() if got is None else got
        else:
            out += _message_text(content).split()
    out += _CHAT_TAIL
    return out


class WordStream:
    """Token i -> word index, by a stride walk over the vocabulary (stride coprime to its size)."""

    __slots__ = ("start", "stride", "rng")

    def __init__(self, seed: int, prompt_key: bytes):
        self.rng = random.Random(zlib.crc32(prompt_key) ^ (seed * 0x9E3779B1))
        self.start = self.rng.randrange(VOCAB_SIZE)
        self.stride = self.rng.randrange(1, VOCAB_SIZE)
        while math.gcd(self.stride, VOCAB_SIZE) != 1:
            self.stride += 1

    def index(self, i: int) -> int:
        return (self.start + i * self.stride) % VOCAB_SIZE

    def text(self, n: int) -> str:
        return "".join(WORDS[self.index(i)] for i in range(n))

    def eos_length(self, mean: float) -> int:
        """A pseudo-EOS position: geometric with the given mean (a constant per-token stop chance)."""
        if mean <= 1:
            return 1
        # inverse CDF of the geometric distribution on {1, 2, ...} with P(stop) = 1 / mean
        return 1 + int(math.log(1.0 - self.rng.random()) / math.log(1.0 - 1.0 / mean))
