"""A pooling request's batch (embeddings' inputs, rerank's query and documents), seeded by
(seed, request index) as every other request is, so any process rebuilds request ``i`` alone.

The batch size is drawn from ``workload.batch_size`` (1 when absent) and each item's length
from ``workload.input_tokens``, the distributions prompts use (``config/lengths.py``), each
from a stream of its own: changing the batch size keeps the first items' lengths. A rerank
request's query is one more draw of ``input_tokens``, before its documents; its prompt tokens
count every query+document pair, as the server scores (and counts) each pair as one sequence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.config import WorkloadConfig
from loadgen.records import RequestSpec
from loadgen.workload.lengths import sample_lengths

# Item ``j`` of request ``i`` is prompt ``i * ITEM_KEYS + j`` of the prompt builder: its own
# opening words, unlike every other item's (config.pooling.MAX_BATCH items at most).
ITEM_KEYS = 4096


class Batches:
    """Request ``i``'s batch: ``request(i)``, and its prompt tokens alone (``prompt_tokens``)."""

    def __init__(self, cfg: WorkloadConfig, prompts: Any, query: bool) -> None:
        self.cfg, self.prompts, self.query = cfg, prompts, query

    def lengths(self, i: int) -> list[int]:
        """Request ``i``'s item lengths: its query's first when it has one, then one per item."""
        cfg = self.cfg
        n = 1
        if cfg.batch_size is not None:
            n = int(sample_lengths(cfg.batch_size, 1, np.random.default_rng([cfg.seed, 6, i]))[0])
        rng = np.random.default_rng([cfg.seed, 7, i])
        return [int(v) for v in sample_lengths(cfg.input_tokens, n + self.query, rng)]

    def request(self, i: int, model: str | None = None) -> RequestSpec:
        texts, counts = [], []
        for j, n in enumerate(self.lengths(i)):
            text, got = self.prompts.build(i * ITEM_KEYS + j, n)
            texts.append(text)
            counts.append(got)
        query, q = (texts.pop(0), counts.pop(0)) if self.query else (texts[0], 0)
        pairs = tuple(q + c for c in counts)
        return RequestSpec(i, query, None, sum(pairs), 0, model=model, inputs=tuple(texts), item_tokens=pairs)

    def prompt_tokens(self, i: int) -> int:
        return self.request(i).prompt_tokens
