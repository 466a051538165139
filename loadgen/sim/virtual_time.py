"""The engine run back to back on its virtual clock: requests at given arrival times
(``simulate``), a closed-loop benchmark, and a measured stage replayed.

``serve_closed_loop`` hands the engine every request the instant a slot frees, as a static
benchmark's table assumes (TensorRT-LLM's ``gptSessionBenchmark``, ``trtllm-bench``, an offline
queue): the calibration table's rows are served so (``calibration.py``).

``replay`` sends given requests as a load generator over a socket does, each reaching the engine
a latency after its send: the engine steps back to back, so a closed loop's next request, sent
when its predecessor's last token arrives, reaches a step already running and joins the one
after it, while one reaching an idle engine starts a step at once. That is a step of TTFT per
request, a fixed step overhead's size, which ``loadgen sim fit`` would otherwise charge to
``step_overhead_ms``; it replays each measured stage so (``analysis/sim_fit_replay.py``).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .config import SimConfig
from .engine import Engine, Seq


@dataclass(frozen=True)
class Served:
    """Mean TTFT and TPOT (ms) and output tokens per second from the first send to the last token."""

    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float


def _served(measured: list[Seq], osl: int) -> Served:
    times = [s.token_vns or [] for s in measured]
    ttft = sum(t[0] - s.arrival_vns for s, t in zip(measured, times)) / len(measured) / 1e6
    tpot = sum(t[-1] - t[0] for t in times) / len(measured) / 1e6 / (osl - 1) if osl > 1 else 0.0
    window_ns = max(t[-1] for t in times) - min(s.arrival_vns for s in measured)
    return Served(ttft, tpot, len(measured) * osl / (window_ns / 1e9))


def _step(engine: Engine, config: SimConfig, isl: int, osl: int) -> list[Seq]:
    """One engine step, its tokens stamped on their sequences; the sequences it finished."""
    step = engine.step()
    if not step.duration_ns:
        raise ValueError(f"a {isl}+{osl}-token request needs more KV blocks than {config.preset} holds")
    for s in step.emitted:
        assert s.token_vns is not None  # set when it was made
        s.token_vns.extend([engine.now_ns] * s.emitting)
    return step.finished


def _seq(isl: int, osl: int) -> Seq:
    s = Seq(isl, osl)
    s.token_vns = []
    return s


def serve_closed_loop(config: SimConfig, isl: int, osl: int, concurrency: int, requests: int) -> Served:
    """``requests`` requests of (isl, osl) tokens with at most ``concurrency`` in flight, each in
    the engine the instant a slot frees, from t = 0 to the last token."""
    engine = Engine(config)
    seqs: list[Seq] = []

    def send() -> None:
        seqs.append(s := _seq(isl, osl))
        engine.submit(s)

    for _ in range(min(concurrency, requests)):
        send()
    while engine.has_work():
        for _ in _step(engine, config, isl, osl):
            if len(seqs) < requests:
                send()
    return _served(seqs, osl)


Request = tuple[int, int, int] | tuple[int, int, int, Sequence[int]]


def simulate(config: SimConfig, requests: Iterable[Request]) -> list[Seq]:
    """Run (arrival_ns, prompt_len, output_len[, block_hashes]) requests on a virtual clock.

    Without block hashes a prompt shares nothing with any other (as loadgen's synthetic prompts,
    whose openings are unique); with them (``prefix_cache.block_hashes`` of its tokens) it can
    hit the prefix cache. Returns the sequences in input order, each with ``arrival_vns``,
    ``admitted_vns``, ``cached_tokens`` and ``token_vns`` (virtual time each token was
    produced), for TTFT / TPOT / queueing analysis.
    """
    engine = Engine(config)
    pending = sorted(
        ((r[0], i, Seq(r[1], r[2], block_hashes=r[3] if len(r) > 3 else ())) for i, r in enumerate(requests)),
        key=lambda t: t[:2],
    )
    seqs = [s for _, _, s in sorted(pending, key=lambda t: t[1])]
    queue = deque(pending)
    while queue or engine.has_work():
        if not engine.has_work() and engine.now_ns < queue[0][0]:
            engine.now_ns = queue[0][0]  # idle: jump to the next arrival
        while queue and queue[0][0] <= engine.now_ns:
            arrival, _, s = queue.popleft()
            s.token_vns = []
            engine.submit(s)
            s.arrival_vns = arrival
        step = engine.step()
        if not step.duration_ns:  # nothing runs and the head of the queue can never fit
            raise ValueError("a request needs more KV blocks than the whole cache holds")
        for s in step.emitted:
            assert s.token_vns is not None  # set above when it was submitted
            s.token_vns.extend([engine.now_ns] * s.emitting)
    return seqs


@dataclass(frozen=True)
class Replayed:
    """Each replayed request's send, first-token, last-token and end times (virtual ns; -1
    where it has none: one the cut stopped has no end, one never sent before it no send)."""

    send_ns: np.ndarray
    first_ns: np.ndarray
    last_ns: np.ndarray
    end_ns: np.ndarray


def replay(
    config: SimConfig,
    prompts: Sequence[int] | np.ndarray,
    outputs: Sequence[int] | np.ndarray,
    *,
    sends_ns: Sequence[int] | np.ndarray,
    concurrency: int | None = None,
    opens: int = 0,
    latency_ns: int = 1,
    resend_ns: int = 0,
    cut_ns: int | None = None,
    serial_ns: int = 0,
) -> Replayed:
    """Requests (their prompt and output tokens, in the order they were sent) served as a load
    generator sends them over a socket: each reaches the engine ``latency_ns`` after its send,
    so one sent while a step runs (a closed loop's next request, sent as the last token of its
    predecessor arrives) joins the step after it, and one reaching an idle engine starts a
    step. Nothing is recorded past ``cut_ns`` (the stage cancelled what was in flight).

    Open loop (``concurrency`` None): request i is sent at ``sends_ns[i]``. Closed loop: the
    first ``opens`` requests (its users' first, a ramp's) at ``sends_ns[i]``, then each end
    sends the next request in order, so ``concurrency`` stay in flight."""
    engine = Engine(config)
    n = len(prompts)
    seqs = [Seq(int(p), int(o), owner=i) for i, (p, o) in enumerate(zip(prompts, outputs))]
    send, first, last, end = (np.full(n, -1, dtype=np.int64) for _ in range(4))
    arrivals: list[tuple[int, int]] = []  # (arrival, request): a heap
    timed = n if concurrency is None else min(max(opens, concurrency), n)
    free_at = -(2**62)
    for i in range(timed):
        send[i] = int(sends_ns[i])
        free_at = max(int(sends_ns[i]) + latency_ns, free_at + serial_ns)
        arrivals.append((free_at, i))
    heapq.heapify(arrivals)
    following = timed  # the next request a closed loop's end sends
    while arrivals or engine.has_work():
        if not engine.has_work() and engine.now_ns < arrivals[0][0]:
            engine.now_ns = arrivals[0][0]  # idle: the next arrival starts a step
        while arrivals and arrivals[0][0] <= engine.now_ns:
            engine.submit(seqs[heapq.heappop(arrivals)[1]])
        step = engine.step()
        if not step.duration_ns:
            s = engine.waiting[0]
            raise ValueError(
                f"a {s.prompt_len}+{s.output_len}-token request needs more KV blocks than the cache holds"
            )
        now = engine.now_ns
        if cut_ns is not None and now > cut_ns:
            break
        for s in step.emitted:
            if s.generated == s.emitting:
                first[s.owner] = now
            last[s.owner] = now
        for s in step.finished:
            end[s.owner] = now
            # A closed loop's user sends its next; during a ramp's timed sends, no one waits.
            if concurrency is not None and following < n and send[timed - 1] <= now:
                send[following] = now + resend_ns
                heapq.heappush(arrivals, (now + resend_ns + latency_ns, following))
                following += 1
    return Replayed(send, first, last, end)
