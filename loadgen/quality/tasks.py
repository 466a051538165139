"""A built-in task set with exact answers: prompts an instruction-tuned model answers exactly at
temperature 0, so accuracy is a number that moves only when the model (or its quantisation, or
the engine) really changed.

Three kinds, each a one-line answer that ``score`` can check without a judge model:

    arithmetic   "What is 347 + 128? Reply with the number only."        -> "475"
    copy         "Repeat the following words exactly, nothing else: ..."  -> the words
    recall       a few "key: value" facts, then "What is the value for <key>? ..." -> the value

Task ``i`` of a set is a pure function of (seed, i): any task can be built alone, in any
process, without building the ones before it. The kinds take turns (task i is of kind
``kinds[i % len(kinds)]``; list a kind twice to draw it twice as often), so every slice of a
run has the same mix. Arithmetic operands come from a seeded permutation of each operator's
operand pairs, so the first 21,578 arithmetic prompts of a set are all different (the first
64,734 tasks of the default mix); copy and recall prompts are drawn from spaces large enough
that a repeat is vanishingly rare.

The wording is a contract: the scripted test server (loadgen/testing) parses these prompts to
answer them, on its own, without importing this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

KINDS: tuple[str, ...] = ("arithmetic", "copy", "recall")

# Operand ranges per operator, chosen so a model's answer is exact at temperature 0: sums of two
# 3-digit numbers, a positive difference, a 3-digit number times a single digit.
_OPERANDS: dict[str, tuple[range, range]] = {
    "+": (range(100, 1000), range(100, 1000)),
    "-": (range(500, 1000), range(100, 500)),
    "x": (range(101, 1000), range(2, 10)),
}
_OPS = tuple(_OPERANDS)

# Common words that are one token in the usual vocabularies, so copying them tests fidelity,
# not spelling.
_COPY_WORDS = tuple(
    "apple river stone cloud garden window bread candle forest mirror silver ladder pencil orange "
    "bridge winter summer rabbit pocket hammer castle meadow planet copper island jacket kettle lemon "
    "marble needle ocean pepper rocket saddle tiger violin wagon yellow anchor basket cotton desert "
    "engine feather guitar harbor lantern magnet napkin pillow quilt ribbon shadow tunnel valley "
    "walnut button carpet dragon falcon glacier helmet jungle kitten".split()
)
_RECALL_KEYS = tuple(
    "amber birch cedar delta ember fjord grove heron indigo jasper kestrel lotus maple nectar onyx "
    "prism quartz raven sierra topaz umber vertex willow xenon yarrow zephyr aspen basalt coral dune "
    "falcon garnet".split()
)
_COPY_LEN = (5, 9)  # words per copy task: 5 to 8
_FACTS = 4  # facts per recall task
_STREAM = 11  # the numpy seed-sequence key that separates these draws from any other use of seed


@dataclass(frozen=True, slots=True)
class Task:
    """One prompt and its exact answer. ``match`` says how ``score`` compares them."""

    kind: str  # "arithmetic" | "copy" | "recall"
    prompt: str  # the user text
    expected: str  # the exact right answer
    match: str  # "exact" | "contains" (loadgen.quality.score.MATCHES)


class TaskSet:
    """The built-in tasks for one seed: ``TaskSet(seed).task(i)`` for any i >= 0."""

    def __init__(self, seed: int, kinds: Sequence[str] = KINDS) -> None:
        kinds = tuple(kinds)
        for k in kinds:
            if k not in KINDS:
                raise ValueError(f"unknown task kind {k!r}; valid: {', '.join(KINDS)}")
        if not kinds:
            raise ValueError(f"no task kinds; valid: {', '.join(KINDS)}")
        self.seed = seed
        self.kinds = kinds
        # Per position of the cycle: its kind, how many of that kind come before it in the cycle,
        # and how many the cycle holds. A kind listed twice is drawn twice as often, and still
        # numbers its tasks 0, 1, 2, ... with no repeats.
        self._slots = [(k, kinds[:j].count(k), kinds.count(k)) for j, k in enumerate(kinds)]
        # Per operator, an affine permutation p -> (a*p + b) mod n of its n operand pairs.
        rng = np.random.default_rng([seed, _STREAM])
        self._perm: dict[str, tuple[int, int, int]] = {}
        for op in _OPS:
            left, right = _OPERANDS[op]
            n = len(left) * len(right)
            a = int(rng.integers(1, n))
            while math.gcd(a, n) != 1:
                a = a % (n - 1) + 1
            self._perm[op] = (a, int(rng.integers(0, n)), n)

    def task(self, i: int) -> Task:
        """Task ``i``: a pure function of (seed, i)."""
        if i < 0:
            raise ValueError(f"task index must be >= 0, got {i}")
        kind, before, per_cycle = self._slots[i % len(self._slots)]
        q = i // len(self._slots) * per_cycle + before  # this task's number among those of its kind
        if kind == "arithmetic":
            return self._arithmetic(q)
        rng = np.random.default_rng([self.seed, _STREAM, i])
        return _copy(rng) if kind == "copy" else _recall(rng)

    def _arithmetic(self, q: int) -> Task:
        op = _OPS[q % len(_OPS)]
        a, b, n = self._perm[op]
        left, right = _OPERANDS[op]
        pair = (a * (q // len(_OPS)) + b) % n
        x, y = left[pair // len(right)], right[pair % len(right)]
        value = x + y if op == "+" else x - y if op == "-" else x * y
        return Task("arithmetic", f"What is {x} {op} {y}? Reply with the number only.", str(value), "exact")


def _copy(rng: np.random.Generator) -> Task:
    n = int(rng.integers(*_COPY_LEN))
    words = " ".join(_COPY_WORDS[j] for j in rng.choice(len(_COPY_WORDS), size=n, replace=False))
    return Task("copy", f"Repeat the following words exactly, nothing else: {words}", words, "exact")


def _recall(rng: np.random.Generator) -> Task:
    keys = [_RECALL_KEYS[j] for j in rng.choice(len(_RECALL_KEYS), size=_FACTS, replace=False)]
    values = [str(v) for v in rng.integers(1000, 10000, size=_FACTS)]
    asked = int(rng.integers(_FACTS))
    facts = "\n".join(f"{k}: {v}" for k, v in zip(keys, values))
    prompt = f"Here are some facts.\n{facts}\nWhat is the value for {keys[asked]}? Reply with the value only."
    return Task("recall", prompt, values[asked], "exact")


def expected_output_tokens(task: Task) -> int:
    """A max_tokens with room for the answer: two tokens a word and one a digit (tokenizers
    that split numbers digit by digit), plus six for a closing full stop or an end-of-turn
    marker. Tight enough that a model that rambles is cut short rather than billed for it."""
    words = len(task.expected.split())
    digits = sum(c.isdigit() for c in task.expected)
    return 2 * words + digits + 6
