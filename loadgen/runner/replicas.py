"""Several replicas behind one run: which replica each request goes to, and which are out of
rotation.

A run against ``target.urls`` sends through ``Balanced``, the driver's ``Backend`` over one
protocol adapter (and one transport, one connection pool) per replica. It picks a replica for
each request by ``target.balance``, stamps the record's ``replica`` before the send, and judges
the replica by the answer. Why here and not in the transport: the pick needs the request (a
session's turns stay on their replica) and the record must name where it went, and both are
above the transport seam; below it every replica is an ordinary transport.

Ejection, because ``least_in_flight`` would otherwise pour the load onto a dead replica (its
refusals come back at once, so it always has the fewest in flight): ``eject_after`` connect
failures in a row take a replica out of rotation for ``eject_s``; then the next request picked
for it is its one trial (the others keep it out until the trial ends). A trial that connects
(any answer but ``connect``, an HTTP error included) brings it back; one that fails keeps it out
twice as long again, at most 8 x ``eject_s``. With every replica out, requests go round robin
over all of them (each fails fast, counted), so a run never stalls waiting for a replica.
Balancing is per process: with worker processes each worker balances its own share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen import records as R
from loadgen.backends.base import ProbeError, StreamingBackend
from loadgen.backends.stream import Live
from loadgen.backends.transports.base import Transport, TransportOptions
from loadgen.clock import now_ns
from loadgen.errors import RunError
from loadgen.redact import redact_url

MAX_BACKOFF = 8  # an ejected replica's wait grows to at most this many eject_s


@dataclass(slots=True)
class Replica:
    """One replica's adapter and transport, and what the balancer knows of it now."""

    index: int
    backend: StreamingBackend
    transport: Transport
    in_flight: int = 0
    failures: int = 0  # connect failures in a row
    out_until_ns: int = 0  # out of rotation until then; 0: in rotation
    failed_trials: int = 0  # trials failed since it went out (its wait doubles with each)
    trial: bool = False  # its one trial request is in flight
    ejections: int = 0  # times it went out of rotation in this process

    def usable(self, t_ns: int) -> bool:
        """In rotation, or out and due its trial (none in flight)."""
        return self.out_until_ns == 0 or (not self.trial and t_ns >= self.out_until_ns)


class Balanced:
    """The driver's ``Backend`` over several replicas (see the module's docstring)."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        policy: str,
        live: Live,
        eject_after: int = 3,
        eject_s: float = 1.0,
    ) -> None:
        self.replicas = list(replicas)
        self.policy, self.live = policy, live
        self.eject_after, self.eject_ns = eject_after, int(eject_s * 1e9)
        self._next = 0  # the round-robin cursor
        self._sessions: dict[int, Replica] = {}  # session_affinity: each session's replica

    def _in_turn(self, t_ns: int, least: bool = False) -> Replica:
        """The next usable replica after the cursor (with ``least``: of the fewest in flight,
        ties to the first after the cursor); every replica when none is usable."""
        n = len(self.replicas)
        order = [self.replicas[(self._next + k) % n] for k in range(n)]
        usable = [r for r in order if r.usable(t_ns)] or order
        pick = min(usable, key=lambda r: r.in_flight) if least else usable[0]
        self._next = (pick.index + 1) % n
        return pick

    def pick(self, spec: R.RequestSpec) -> Replica:
        t = now_ns()
        if self.policy == "least_in_flight":
            return self._in_turn(t, least=True)
        if self.policy == "session_affinity" and spec.session_id is not None:
            mine = self._sessions.get(spec.session_id)
            # A session whose replica went out of rotation moves (its cache is lost, not its turns).
            if mine is None or not mine.usable(t):
                mine = self._sessions[spec.session_id] = self._in_turn(t)
            return mine
        return self._in_turn(t)

    async def send(self, spec: R.RequestSpec, rec: R.RequestRecord) -> None:
        r = self.pick(spec)
        rec.replica = r.index
        trial = bool(r.out_until_ns) and not r.trial and now_ns() >= r.out_until_ns
        r.trial |= trial
        r.in_flight += 1
        try:
            await r.backend.send(spec, rec)
        finally:
            r.in_flight -= 1
            # No class and not ok: cancelled before the backend could say so.
            self._judge(r, rec.error_class or (None if rec.ok else R.CANCELLED), trial)

    def _judge(self, r: Replica, error_class: str | None, trial: bool) -> None:
        """Count a connect failure, or clear the count; a cancelled request says nothing."""
        if trial:
            r.trial = False
        if error_class == R.CANCELLED:
            return
        if error_class != R.CONNECT:  # it answered: in rotation
            r.failures = r.failed_trials = r.out_until_ns = 0
            return
        r.failures += 1
        if trial:  # out again, for longer
            r.failed_trials += 1
            r.out_until_ns = now_ns() + self.eject_ns * min(2**r.failed_trials, MAX_BACKOFF)
        elif not r.out_until_ns and r.failures >= self.eject_after:
            r.ejections += 1
            r.out_until_ns = now_ns() + self.eject_ns

    async def ready(self) -> None:
        for r in self.replicas:
            await r.backend.ready()

    async def aclose(self) -> None:
        """Close every replica's transport but the first (the run's own, closed by its owner)."""
        for r in self.replicas[1:]:
            await r.transport.aclose()


async def open_replicas(
    backend_cls: type[StreamingBackend],
    kind: str,
    options: Sequence[TransportOptions],
    model: str | None,
    scrub: Callable[[str], str],
) -> list[Transport]:
    """A transport to each replica after the first, each probed as the first was: a replica that
    is down or does not serve the model stops the run before any load, named (a run that meant
    to spread the load over N replicas and silently used N - 1 would measure another fleet)."""
    opened: list[Transport] = []
    try:
        for i, opts in enumerate(options, start=1):
            transport = backend_cls.open_transport(kind, opts)
            opened.append(transport)
            try:
                await backend_cls.probe(transport, opts.base_url, model)
            except ProbeError as exc:
                raise RunError(
                    scrub(
                        f"replica {i} of target.urls ({redact_url(opts.base_url)}) cannot be "
                        f"benchmarked: {exc}; start it, or leave it out of target.urls"
                    )
                ) from None
    except BaseException:
        for t in opened:
            await t.aclose()
        raise
    return opened


def balanced(
    policy: str,
    first: StreamingBackend,
    transports: Sequence[Transport],
    make: Callable[[Transport], StreamingBackend],
    eject: tuple[int, float],
) -> Balanced:
    """The balancer over ``first`` (the first replica's adapter) and one adapter per further
    transport, each made by ``make`` as ``first`` was; await its ``ready`` before sending."""
    replicas = [Replica(0, first, first.transport)]
    replicas += [Replica(i, make(t), t) for i, t in enumerate(transports, start=1)]
    return Balanced(replicas, policy, first.live, *eject)
