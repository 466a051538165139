"""Which model (base or adapter) request i asks for, under a LoRA mix: a function of (seed, i).

Like the lengths, the draw is made in blocks from a generator seeded by (seed, block), so any
worker rebuilds request i's model without drawing the ones before it, and two runs of a
profile ask for the same sequence.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from loadgen.config.mix import ModelMix

BLOCK = 1024
_STREAM = 7  # the mix's own generator stream: adding a mix moves no length or prompt
_CACHED_BLOCKS = 16


class ModelPicker:
    """Request i's model name: ``mix[i % n]`` in round robin, else a weighted draw."""

    def __init__(self, mix: ModelMix, seed: int) -> None:
        self.names = mix.names
        self.round_robin = mix.choice == "round_robin"
        w = np.array([m.weight for m in mix.mix], dtype=float)
        self._p = w / w.sum()
        self._seed = seed
        self._blocks: OrderedDict[int, np.ndarray] = OrderedDict()

    def model(self, i: int) -> str:
        if self.round_robin:
            return self.names[i % len(self.names)]
        b = i // BLOCK
        picks = self._blocks.get(b)
        if picks is None:
            rng = np.random.default_rng([self._seed, _STREAM, b])
            picks = rng.choice(len(self.names), size=BLOCK, p=self._p)
            self._blocks[b] = picks
            if len(self._blocks) > _CACHED_BLOCKS:
                self._blocks.popitem(last=False)
        return self.names[int(picks[i % BLOCK])]
