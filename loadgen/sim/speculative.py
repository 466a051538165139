"""A draft model beside the target: speculative decoding as vLLM runs it, with a set acceptance.

Each decode step the draft model proposes ``k`` tokens for every decoding sequence, one small
forward pass per token, and the target verifies all k + 1 positions in one pass (T = B (k + 1)
new tokens, reading the same context as a plain decode step). Draft token i (from 1) is accepted
when it and every one before it are: each with probability ``acceptance`` (seeded draws, one per
position until the first rejection), so a step emits 1 + accepted tokens for the sequence, the
last one the target's own. A draft pass costs ``draft_cost`` of the target's plain decode step
at the same batch (a model ~1/20 of the target's size: 0.05), k of them a step.

Counted as vLLM counts them (``vllm:spec_decode_num_drafts``, ``…_draft_tokens``,
``…_accepted_tokens``, ``…_accepted_tokens_per_pos`` with a ``position`` label): a draft per
decoding sequence a step, k draft tokens, the accepted ones, and per position how many drafts
had it accepted. The expected acceptance rate is (a + a² + … + a^k) / k for acceptance a.
"""

from __future__ import annotations

import random


class Drafter:
    """The draft model's proposals and their verification, counted."""

    def __init__(self, k: int, acceptance: float, draft_cost: float, seed: int) -> None:
        self.k, self.acceptance, self.draft_cost = k, acceptance, draft_cost
        self._rng = random.Random(f"spec-{seed}")
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.accepted_per_position = [0] * k

    def verify(self, batch: int) -> list[int]:
        """One step's accepted draft tokens for each of ``batch`` decoding sequences, counted."""
        out = []
        for _ in range(batch):
            a = 0
            while a < self.k and self._rng.random() < self.acceptance:
                self.accepted_per_position[a] += 1
                a += 1
            out.append(a)
        self.drafts += batch
        self.draft_tokens += batch * self.k
        self.accepted_tokens += sum(out)
        return out

    def draft_times(self, plain: tuple[float, float]) -> tuple[float, float]:
        """The k draft passes' (memory, compute) seconds, for a step whose plain decode's roofline
        times (without overhead) are ``plain``: a smaller model of the same shape, each time
        scaled by its cost, so the passes take ``k x draft_cost`` of the plain step and the GPU
        draws the same power through them."""
        scale = self.k * self.draft_cost
        return scale * plain[0], scale * plain[1]
