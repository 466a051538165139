"""Where a request's user prompt comes from when it is not a synthetic one, and who shares what.

Each source answers, for request ``i``: its lengths (input, output) and its user prompt with
the expected answer if it has one. All are deterministic in (seed, i), so worker processes
rebuild request ``i`` exactly as the parent would.

- ``DatasetSource``: entries of a local dataset, filtered, then ordered by the seed; past the
  last entry it starts over, each repeat opened by a few words unique to the request so a
  prefix cache cannot serve a repeat from memory (the original is kept word for word).
- ``TraceSource``: a trace's rows in order; Mooncake ``hash_ids`` become 512-token blocks, the
  same id the same words (or ids), so a prefix cache sees exactly the trace's reuse.
- ``TaskSource``: the built-in task set with exact answers (``loadgen.quality.tasks``).
- ``PrefixGroups``: which requests share a prefix (group by the seed) and that prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from loadgen.config.traffic import DatasetConfig, PrefixConfig, TasksConfig, TraceConfig
from loadgen.quality.tasks import Task, TaskSet
from loadgen.records import MediaPart
from loadgen.workload.datasets import Entry, load_dataset, select, word_count
from loadgen.workload.media import MediaCache, file_part
from loadgen.workload.traces import Trace, load_trace

Prompt = str | list[int]

# Keys of shared blocks: prefix groups are numbered from here, away from any trace hash id.
_GROUP_KEY = 1 << 30


@lru_cache(maxsize=4)
def trace_for(cfg: TraceConfig) -> Trace:
    """The trace a profile names, read once per process (the schedule and the prompts both
    need it)."""
    return load_trace(
        cfg.path, cfg.format, time_scale=cfg.time_scale, start_s=cfg.start_s, window_s=cfg.window_s
    )


class DatasetSource:
    def __init__(self, cfg: DatasetConfig, seed: int, count: Callable[[str], int], cache: MediaCache):
        self.cfg, self._count, self._cache = cfg, count, cache
        self.entries: list[Entry] = select(
            load_dataset(cfg.path, cfg.format),
            seed=seed,
            count_tokens=count,
            min_input_tokens=cfg.min_input_tokens,
            max_input_tokens=cfg.max_input_tokens,
            min_output_tokens=cfg.min_output_tokens,
            max_output_tokens=cfg.max_output_tokens,
        )
        self._inputs = [count(e.prompt) for e in self.entries]
        for e in self.entries:  # read and encoded before the run, not in the loop that stamps tokens
            if cache.held >= cache.limit // 2:
                break  # the rest when first sent
            for m in e.media:
                file_part(m.kind, m.ref, m.pixels, m.seconds, cache)

    def lengths(self, i: int, profile_output: int) -> tuple[int, int]:
        """The entry's input length, and its output length (the profile's ``profile_output``
        when it has none or ``output_lengths: profile``)."""
        k = i % len(self.entries)
        e = self.entries[k]
        n_in = self._inputs[k] + (_REPEAT_WORDS if i >= len(self.entries) else 0)
        if e.output_tokens is not None and self.cfg.output_lengths == "data":
            return n_in, e.output_tokens
        return n_in, profile_output

    def user(self, i: int, prompts: Any) -> tuple[Prompt, int, str | None, str]:
        k = i % len(self.entries)
        e = self.entries[k]
        text, n = e.prompt, self._inputs[k]
        if i >= len(self.entries):  # a repeat: opened by words unique to this request
            head, _ = prompts.build(i, _REPEAT_WORDS)
            text, n = f"{head} {text}", n + _REPEAT_WORDS
        return text, n, e.expected, self.cfg.match

    def media(self, i: int) -> tuple[MediaPart, ...]:
        """The entry's own images and audio (read once per process, then shared)."""
        e = self.entries[i % len(self.entries)]
        return tuple(file_part(m.kind, m.ref, m.pixels, m.seconds, self._cache) for m in e.media)


_REPEAT_WORDS = 4


class TraceSource:
    def __init__(self, cfg: TraceConfig):
        self.trace = trace_for(cfg)

    def __len__(self) -> int:
        return len(self.trace.offsets_ns)

    def lengths(self, i: int, profile_output: int) -> tuple[int, int]:
        t = self.trace
        return int(t.input_tokens[i]), int(t.output_tokens[i])

    def user(self, i: int, prompts: Any) -> tuple[Prompt, int, str | None, str]:
        t = self.trace
        n = int(t.input_tokens[i])
        if t.hash_ids is None:
            prompt, got = prompts.build(i, n)
            return prompt, got, None, "exact"
        size = t.block_tokens
        parts: list[Any] = []
        left = n
        for h in t.hash_ids[i]:
            if left <= 0:
                break
            block, _ = prompts.block(int(h), min(size, left))
            parts.append(block)
            left -= size
        if left > 0:  # more tokens than its blocks cover: the rest is the request's own
            tail, _ = prompts.build(i, left)
            parts.append(tail)
        return _join(parts), n, None, "exact"


class TaskSource:
    def __init__(self, cfg: TasksConfig, seed: int):
        self.tasks = TaskSet(seed, cfg.kinds)
        self._last: tuple[int, Task, int] | None = None

    def _task(self, i: int) -> tuple[Task, int]:
        """Task ``i`` and its length: building a request asks for its lengths, then its
        prompt, so the last one is kept rather than drawn twice."""
        if self._last is None or self._last[0] != i:
            task = self.tasks.task(i)
            self._last = (i, task, word_count(task.prompt))
        return self._last[1], self._last[2]

    def lengths(self, i: int, profile_output: int) -> tuple[int, int]:
        return self._task(i)[1], profile_output

    def user(self, i: int, prompts: Any) -> tuple[Prompt, int, str | None, str]:
        task, n = self._task(i)
        return task.prompt, n, task.expected, task.match


class PrefixGroups:
    """Request ``i`` shares group g's prefix with probability ``fraction`` (g uniform over the
    groups, both drawn from (seed, i)); the prefix is ``shared_tokens`` long."""

    def __init__(self, cfg: PrefixConfig, seed: int, prompts: Any):
        self.cfg, self._seed, self._prompts = cfg, seed, prompts
        self._made: dict[int, tuple[Prompt, int]] = {}

    def group(self, i: int) -> int | None:
        if not self.cfg.shared_tokens:
            return None
        rng = np.random.default_rng([self._seed, 12, i])
        u, g = rng.random(), int(rng.integers(self.cfg.groups))
        return g if u < self.cfg.fraction else None

    def prefix(self, g: int) -> tuple[Prompt, int]:
        if g not in self._made:
            if len(self._made) > 4096:
                self._made.clear()
            self._made[g] = self._prompts.block(_GROUP_KEY + g, self.cfg.shared_tokens)
        text, n = self._made[g]
        return (list(text) if isinstance(text, list) else text), n


def _join(parts: list[Any]) -> Prompt:
    if parts and isinstance(parts[0], list):
        return [x for p in parts for x in p]
    return " ".join(parts)
