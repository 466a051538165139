"""The preflight: one request, not measured, in the run's exact body shape, before the load.

Why: a server that refuses the body (an extension field it does not define, a model it does not
serve, a path it does not route) would otherwise fail every request of the run, and the reason
would sit in requests.jsonl while the console counted ``http_422``. One request up front turns
that into one line with the server's own message and the fix, exit 2, before any load.

What counts as a refusal: a 4xx answer other than 408 and 429 (those are the server being busy,
which the load is there to measure). Anything else that goes wrong (a 5xx, a timeout, a broken
stream) lets the load go ahead with a warning: each such request will be counted and classed.

``target.ignore_eos: auto``: when the refused body carried ``ignore_eos``, the same request goes
again without it; if that one is taken, the run drops the field (outputs then end where the
server ends them, ``max_tokens`` capping them) and the conditions say so. The preflight's
``max_tokens`` is cut to ``MAX_TOKENS``: the body's shape, not its length, is what is checked, and
a long answer would only delay the load.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from loadgen import records as R
from loadgen.backends.base import StreamingBackend
from loadgen.backends.rejections import hint
from loadgen.clock import now_ns
from loadgen.errors import RunError
from loadgen.redact import Scrubber
from loadgen.summary.conditions import ConditionsServerPreflight

MAX_TOKENS = 8
PREFLIGHT_ID = -1  # the record id of the preflight request: never a run's
DROPPED_IGNORE_EOS = (
    "the server does not take ignore_eos: output lengths are the server's, max_tokens caps them"
)


@dataclasses.dataclass(frozen=True, slots=True)
class Preflight:
    """What the preflight heard, for ``conditions.server.preflight`` and the console."""

    sent: bool
    ok: bool = False
    error_class: str | None = None
    message: str | None = None  # the server's own, scrubbed
    dropped: tuple[str, ...] = ()  # fields the run sends no more (ignore_eos under auto)
    note: str | None = None

    def conditions(self) -> ConditionsServerPreflight:
        return ConditionsServerPreflight(
            sent=self.sent,
            ok=self.ok,
            error_class=self.error_class,
            message=self.message,
            dropped=list(self.dropped),
            note=self.note,
        )


def refused(rec: R.RequestRecord) -> bool:
    """A refusal of the request itself (4xx but 408 and 429), not a busy or failing server."""
    status = rec.http_status or 0
    return not rec.ok and 400 <= status < 500 and status not in (408, 429)


async def preflight(
    make: Callable[[bool], Awaitable[StreamingBackend]],
    spec: R.RequestSpec,
    ignore_eos: bool | str,
    scrubber: Scrubber,
    status: Callable[[str], None],
) -> Preflight:
    """Send ``spec`` once (max_tokens cut to ``MAX_TOKENS``) through ``make(ignore_eos)``, a
    backend of the run's options counting into nothing the run shows. Raises RunError naming
    the server's reason and the fix when the server refuses the body; ``dropped`` says what
    the run must send without (ignore_eos, under auto)."""
    spec = dataclasses.replace(spec, output_tokens=min(spec.output_tokens, MAX_TOKENS))
    asks_eos = ignore_eos is not False
    rec = await _send(await make(asks_eos), spec, scrubber)
    if rec.ok:
        return Preflight(sent=True, ok=True)
    if not refused(rec):
        status(
            f"warning: the preflight request failed ({rec.error_class}: {rec.error_message}); "
            "the load goes ahead and counts each failure"
        )
        return Preflight(sent=True, error_class=rec.error_class, message=rec.error_message)
    if ignore_eos == "auto":
        again = await _send(await make(False), spec, scrubber)
        if again.ok:
            status(f"preflight: {DROPPED_IGNORE_EOS} (target.ignore_eos: auto; it said: {rec.error_message})")
            return Preflight(
                sent=True,
                ok=True,
                error_class=rec.error_class,
                message=rec.error_message,
                dropped=("ignore_eos",),
                note=DROPPED_IGNORE_EOS,
            )
        if refused(again):
            rec = again
    raise RunError(refusal_text(rec))


def refusal_text(rec: R.RequestRecord) -> str:
    """The one line a refused preflight ends the run with: the status, the server's message,
    the fix."""
    cls = rec.error_class or "unknown"
    fix = hint(cls, rec.error_message) or "fix the request the profile builds, or pass --no-preflight"
    return (
        f"the server refused the preflight request (HTTP {rec.http_status}): "
        f"{rec.error_message or '(no message)'}; {fix}"
    )


async def _send(backend: StreamingBackend, spec: R.RequestSpec, scrubber: Scrubber) -> R.RequestRecord:
    t = now_ns()
    rec = R.RequestRecord(
        id=PREFLIGHT_ID,
        warmup=True,
        t_sched_ns=t,
        t_send_ns=t,
        requested_output_tokens=spec.output_tokens,
        requested_prompt_tokens=spec.prompt_tokens,
    )
    await backend.send(spec, rec)
    scrubber.scrub_record(rec)
    return rec
