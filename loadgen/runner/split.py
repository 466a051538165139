"""Splitting one stage's load among worker processes so that the union is exactly the stage.

The parent builds the stage's shape and limits as a one-process run would (``plan.shape_for``);
``split`` cuts them into one share per worker, and each worker drives its share with the same
driver. What a share keeps:

- **Closed loop**: the slots are divided (worker k gets ``C // N`` slots, one more for the
  first ``C % N``), and so are the request ids: id ``first + j`` belongs to the worker owning
  slot ``j mod C``. A count-limited stage therefore sends exactly its count, each worker a
  share proportional to its slots; a duration-limited one numbers its requests without gaps
  per slot. A ramp opens each worker's slots over the same time, from its share of the
  previous level.
- **Open loop**: every deadline of the stage's schedule goes to one worker, drawn at random
  from the seed (independent thinning of a Poisson process leaves each worker's stream
  Poisson at rate/N, where a round robin would make it Erlang, i.e. more regular than asked),
  so the union of the workers' sends is exactly the schedule. An in-flight cap is divided
  like slots.

Request ids keep their meaning (the workload builds spec ``i`` identically in every process),
and the warm-up rule counts from the stage's first id, so warm-up means the same requests
however the stage is split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from loadgen.runner.driver import Limits
from loadgen.runner.shapes import ClosedLoop, LoadShape, OpenLoop


@dataclass(frozen=True, slots=True)
class SlotIds:
    """The ids of a closed-loop worker: ``first + m * period + s`` for its slots ``s`` in
    ``[slot_lo, slot_hi)``, m = 0, 1, ..., below ``first + count`` when the stage has a count."""

    first: int
    period: int
    slot_lo: int
    slot_hi: int
    count: int | None

    def __iter__(self) -> Iterator[int]:
        end = None if self.count is None else self.first + self.count
        base = self.first
        while True:
            for s in range(self.slot_lo, self.slot_hi):
                i = base + s
                if end is not None and i >= end:
                    return
                yield i
            base += self.period

    def __contains__(self, i: object) -> bool:
        if not isinstance(i, int | np.integer):
            return False
        j = int(i) - self.first
        in_range = j >= 0 and (self.count is None or j < self.count)
        return in_range and self.slot_lo <= j % self.period < self.slot_hi


def _parts(total: int, n: int) -> list[int]:
    """``total`` divided into ``n`` near-equal whole parts, the larger ones first."""
    return [total // n + (1 if k < total % n else 0) for k in range(n)]


def split(
    shape: LoadShape, limits: Limits, workers: int, seed: int, stage_index: int = 0
) -> list[tuple[LoadShape, Limits] | None]:
    """One (shape, limits) per worker, None for a worker with nothing to send in this stage
    (fewer slots than workers). One worker gets the stage unchanged."""
    if workers <= 1:
        return [(shape, limits)]
    if isinstance(shape, ClosedLoop):
        return _split_closed(shape, limits, workers)
    if isinstance(shape, OpenLoop):
        return _split_open(shape, limits, workers, seed, stage_index)
    raise TypeError(f"cannot split a {type(shape).__name__} among worker processes")


def _split_closed(shape: ClosedLoop, limits: Limits, n: int) -> list[tuple[LoadShape, Limits] | None]:
    total = None if limits.num_requests is None else limits.num_requests + limits.warmup_requests
    slots = _parts(shape.concurrency, n)
    ramp_from = _parts(min(shape.ramp_from, shape.concurrency), n)
    out: list[tuple[LoadShape, Limits] | None] = []
    lo = 0
    for k in range(n):
        hi = lo + slots[k]
        if slots[k] == 0:
            out.append(None)
            continue
        ids = SlotIds(limits.first_id, shape.concurrency, lo, hi, total)
        part = ClosedLoop(slots[k], ramp_s=shape.ramp_s, ramp_from=ramp_from[k])
        out.append((part, dataclasses.replace(limits, ids=ids)))
        lo = hi
    return out


def _split_open(
    shape: OpenLoop, limits: Limits, n: int, seed: int, stage_index: int
) -> list[tuple[LoadShape, Limits] | None]:
    offsets = np.asarray(shape.schedule_ns, dtype=np.int64)
    total = None if limits.num_requests is None else limits.num_requests + limits.warmup_requests
    if total is not None:
        offsets = offsets[:total]
    ids = limits.first_id + np.arange(len(offsets), dtype=np.int64)
    owner = np.random.default_rng([seed, 7, stage_index]).integers(0, n, len(offsets))
    caps: list[int | None] = list(_parts(shape.max_concurrency, n)) if shape.max_concurrency else [None] * n
    out: list[tuple[LoadShape, Limits] | None] = []
    for k in range(n):
        mine = owner == k
        if not mine.any():
            out.append(None)
            continue
        cap = caps[k]
        part = OpenLoop(offsets[mine], None if cap is None else max(1, cap))
        out.append((part, dataclasses.replace(limits, ids=ids[mine].tolist())))
    return out
