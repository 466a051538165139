"""Block-level automatic prefix caching, after vLLM v1's APC, reduced to what changes timing.

A prompt is cut into full blocks of ``block_size`` token identities (see ``text.py``); block k's
hash covers block k-1's hash and its own tokens, so equal hashes mean equal prompts up to the end
of that block, never just an equal block somewhere else. The cache is an LRU set of those
hashes holding at most the engine's KV block count. A sequence's hit is the longest run of its
leading hashes found in the set, capped one token short of the prompt: the last prompt token
must be computed to get logits, and as in vLLM the cap is block-aligned, so a prompt that hits in
full recomputes its last block.

What is simplified against vLLM (it keeps cached blocks in the KV pool itself, evicts only free
ones, and shares a running block among its users): here the set is bookkeeping beside the pool,
a hit saves compute but not memory (the sequence still reserves blocks for its whole prompt), and
eviction is plain LRU over the set, in-use blocks included. Hashes are Python's ``hash`` of
tuples: 64 bits, fast, and only meaningful inside one process, which is all the cache needs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

# The parent of a prompt's first block (vLLM's NONE_HASH).
_ROOT = 0x5EED


def block_hashes(tokens: Sequence[Hashable], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` (a partial last block has none)."""
    out: list[int] = []
    h = _ROOT
    for end in range(block_size, len(tokens) + 1, block_size):
        h = hash((h, tuple(tokens[end - block_size : end])))
        out.append(h)
    return out


class PrefixCache:
    """An LRU set of block hashes with vLLM's counters, in tokens.

    ``queries`` grows by the prompt length of every admitted sequence and ``hits`` by its cached
    tokens (vLLM's ``prefix_cache_queries`` / ``prefix_cache_hits``).
    """

    __slots__ = ("capacity", "block_size", "queries", "hits", "_lru")

    def __init__(self, capacity_blocks: int, block_size: int):
        self.capacity = capacity_blocks
        self.block_size = block_size
        self.queries = 0
        self.hits = 0
        self._lru: OrderedDict[int, None] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._lru

    def order(self) -> list[int]:
        """The cached hashes, least recently used first (the next to be evicted)."""
        return list(self._lru)

    def lookup(self, hashes: Sequence[int], prompt_len: int) -> int:
        """Cached tokens for a prompt: its longest run of leading hits, at most prompt_len - 1
        rounded down to whole blocks. Changes nothing (the scheduler may ask and then wait)."""
        limit = min(len(hashes), (prompt_len - 1) // self.block_size)
        lru = self._lru
        n = 0
        while n < limit and hashes[n] in lru:
            n += 1
        return n * self.block_size

    def admit(self, hashes: Sequence[int], prompt_len: int) -> int:
        """``lookup`` for a sequence being admitted, counted in ``queries`` and ``hits``."""
        cached = self.lookup(hashes, prompt_len)
        self.queries += prompt_len
        self.hits += cached
        return cached

    def clear(self) -> None:
        """Forget every cached block (vLLM's ``POST /reset_prefix_cache``, SGLang's ``POST
        /flush_cache``); the counters keep counting, as vLLM's do."""
        self._lru.clear()

    def insert(self, hashes: Sequence[int]) -> None:
        """Cache (or refresh) a computed prompt's blocks, evicting the least recently used.

        Last block first, so the prompt's first block ends up the most recent: vLLM frees a
        request's blocks tail first for the same reason, since openings are what others share.
        """
        lru = self._lru
        for h in reversed(hashes):
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
        while len(lru) > self.capacity:
            lru.popitem(last=False)
