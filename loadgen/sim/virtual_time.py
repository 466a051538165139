"""The engine run back to back on its virtual clock: requests at given arrival times
(``simulate``), and a closed-loop stage served two ways.

``serve_closed_loop`` hands the engine every request the instant a slot frees, as a static
benchmark's table assumes (TensorRT-LLM's ``gptSessionBenchmark``, ``trtllm-bench``, an offline
queue): the calibration table's rows are served so (``calibration.py``).

``serve_stage`` sends them as a load generator over a socket does. The engine steps back to back,
so a request sent when the previous answer's last token arrives reaches a step already running and
joins the one after it; and a stage's first wave arrives one request at a time, so the first step
holds only the first prompt while the rest queue behind it. Both cost one step of TTFT per
request, which is a fixed step overhead's size: ``loadgen sim fit`` serves a measured stage so,
or it would put them into ``step_overhead_ms``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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


def serve_stage(
    config: SimConfig, isl: int, osl: int, concurrency: int, requests: int, warmup: int = 0
) -> Served:
    """``warmup`` then ``requests`` requests of (isl, osl) tokens, ``concurrency`` in flight, sent
    as a client sends them: each joins the step after the one running when it was sent. The
    figures are the measured requests' (the warm-up left out, as a run's summary leaves it), the
    throughput over their window: the first one's send to the last one's end."""
    total = requests + warmup
    engine = Engine(config)
    seqs: list[Seq] = []
    sent: list[tuple[Seq, int]] = []  # sent, not yet in the engine, with their send times

    def send(at_ns: int) -> None:
        seqs.append(s := _seq(isl, osl))
        sent.append((s, at_ns))

    def arrive() -> None:
        for s, at_ns in sent:
            engine.submit(s)
            s.arrival_vns = at_ns
        sent.clear()

    for _ in range(min(concurrency, total)):
        send(0)
    first, *rest = sent
    sent[:] = [first]
    arrive()
    sent[:] = rest
    while engine.has_work() or sent:
        if not engine.has_work():  # idle: a request sent now starts the next step
            arrive()
        late = list(sent)  # these were sent while this step runs
        sent.clear()
        finished = _step(engine, config, isl, osl)
        sent[:0] = late
        arrive()
        for _ in finished:
            if len(seqs) < total:
                send(engine.now_ns)
    return _served(seqs[warmup:], osl)


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
