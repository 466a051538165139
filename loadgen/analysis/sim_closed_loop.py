"""A closed-loop stage as a load generator sends it, on the simulator's engine in virtual time.

``loadgen.sim.calibration.serve_closed_loop`` hands the engine every request the instant a slot
frees, as a static benchmark's table assumes. A client over a socket cannot: the engine steps
back to back, so a request sent when the previous answer's last token arrives reaches a step
already running and joins the one after it; and a stage's first wave arrives one request at a
time, so the first step holds only the first prompt while the rest queue behind it. Both cost
one step of TTFT per request, which is a fixed step overhead's size: a fit that ignored them
would put them into ``step_overhead_ms``. ``serve_stage`` models exactly these two delays.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.sim import SimConfig
from loadgen.sim.engine import Engine, Seq


@dataclass(frozen=True)
class Served:
    """Mean TTFT and TPOT (ms) and output tokens per second from the first send to the last token."""

    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float


def serve_stage(config: SimConfig, isl: int, osl: int, concurrency: int, requests: int) -> Served:
    """``requests`` requests of (isl, osl) tokens, ``concurrency`` in flight, sent as a client
    sends them: each joins the step after the one running when it was sent."""
    engine = Engine(config)
    seqs: list[Seq] = []
    sent: list[tuple[Seq, int]] = []  # sent, not yet in the engine, with their send times

    def send(at_ns: int) -> None:
        s = Seq(isl, osl)
        s.token_vns = []
        seqs.append(s)
        sent.append((s, at_ns))

    def arrive() -> None:
        for s, at_ns in sent:
            engine.submit(s)
            s.arrival_vns = at_ns
        sent.clear()

    for _ in range(min(concurrency, requests)):
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
        step = engine.step()
        if not step.duration_ns:
            raise ValueError(f"a {isl}+{osl}-token request needs more KV blocks than {config.preset} holds")
        sent[:0] = late
        arrive()
        for s in step.emitted:
            assert s.token_vns is not None  # set by send()
            s.token_vns.append(engine.now_ns)
        for _ in step.finished:
            if len(seqs) < requests:
                send(engine.now_ns)
    times = [s.token_vns or [] for s in seqs]
    ttft = sum(t[0] - s.arrival_vns for s, t in zip(seqs, times)) / len(seqs) / 1e6
    tpot = sum(t[-1] - t[0] for t in times) / len(seqs) / 1e6 / (osl - 1) if osl > 1 else 0.0
    return Served(ttft, tpot, requests * osl / (engine.now_ns / 1e9))
