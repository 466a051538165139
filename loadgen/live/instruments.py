"""The client's own metrics, the one list of them: what ``--metrics-port`` serves to Prometheus
and ``--otlp`` pushes to an OpenTelemetry collector, under the same definitions.

Names follow OpenTelemetry's GenAI semantic conventions where they name the figure (client
inference: ``gen_ai.client.operation.duration``, ``…time_to_first_chunk``,
``…time_per_output_chunk``, ``gen_ai.client.token.usage``, in seconds and tokens, with their
recommended bucket boundaries), and ``loadgen.*`` where they do not (requests started, finished
by outcome and error class, in flight, the stage). Prometheus gets the OpenTelemetry names as
an OpenTelemetry collector's Prometheus exporter would write them (dots to underscores, the
unit as a suffix, ``_total`` on counters), so one Grafana board reads either path
(``examples/grafana/loadgen-client.json``).

Each finished record is observed once (``observe``): its TTFT, E2E, chunk gaps and token counts
go to every histogram, with the request's model, operation and error type as attributes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["INSTRUMENTS", "Instrument", "Observation", "observe", "prometheus_name"]

Kind = Literal["counter", "gauge", "histogram"]

# The semantic conventions' recommended boundaries (gen-ai-metrics.md, client metrics).
_DURATION_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_FIRST_CHUNK_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_PER_CHUNK_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


@dataclass(frozen=True, slots=True)
class Instrument:
    """One exported metric: its OpenTelemetry name, kind, unit, description and, for a histogram,
    its bucket boundaries and the observation field it takes its values from."""

    name: str
    kind: Kind
    unit: str
    description: str
    buckets: tuple[float, ...] = ()
    field: str = ""


INSTRUMENTS: tuple[Instrument, ...] = (
    Instrument("loadgen.client.requests.started", "counter", "{request}", "requests handed to the server"),
    Instrument(
        "loadgen.client.requests.finished",
        "counter",
        "{request}",
        "requests finished, by outcome (ok, failed, cancelled) and error.type",
    ),
    Instrument(
        "loadgen.client.requests.in_flight", "gauge", "{request}", "requests sent and not yet finished"
    ),
    Instrument("loadgen.client.stage", "gauge", "1", "the load stage running (0 for a single-stage run)"),
    Instrument(
        "gen_ai.client.operation.duration",
        "histogram",
        "s",
        "end-to-end latency of finished requests: send to the end of the response",
        _DURATION_S,
        "e2e_s",
    ),
    Instrument(
        "gen_ai.client.operation.time_to_first_chunk",
        "histogram",
        "s",
        "time to first token: send to the first token-bearing chunk (loadgen's TTFT)",
        _FIRST_CHUNK_S,
        "ttft_s",
    ),
    Instrument(
        "gen_ai.client.operation.time_per_output_chunk",
        "histogram",
        "s",
        "gaps between consecutive token-bearing chunks (loadgen's ITL per chunk)",
        _PER_CHUNK_S,
        "gaps_s",
    ),
    Instrument(
        "gen_ai.client.token.usage",
        "histogram",
        "{token}",
        "tokens per finished request, by gen_ai.token.type (input, output)",
        _TOKENS,
        "tokens",
    ),
)


def prometheus_name(inst: Instrument) -> str:
    """The name an OpenTelemetry collector's Prometheus exporter gives ``inst``."""
    base = inst.name.replace(".", "_")
    if inst.unit == "s":
        base += "_seconds"
    return base + "_total" if inst.kind == "counter" else base


@dataclass(slots=True)
class Observation:
    """One finished record's values, in the instruments' units."""

    ok: bool
    outcome: str  # "ok", "failed" or "cancelled"
    error_type: str | None
    model: str | None
    stage: int
    warmup: bool
    e2e_s: float | None
    ttft_s: float | None
    gaps_s: np.ndarray  # every gap between token-bearing chunks, s
    input_tokens: int | None
    output_tokens: int | None

    def points(self) -> Iterator[tuple[str, float, tuple[tuple[str, str], ...]]]:
        """A measured record's one-per-request histogram values: (the instrument's ``field``,
        the value, attributes of this value beyond the request's: a token count's type). Its
        chunk gaps, one per chunk, are ``gaps_s``: an exporter takes them as an array."""
        if self.e2e_s is not None:
            yield "e2e_s", self.e2e_s, ()
        if self.ttft_s is not None:
            yield "ttft_s", self.ttft_s, ()
        for kind, n in (("input", self.input_tokens), ("output", self.output_tokens)):
            if n is not None:
                yield "tokens", n, (("gen_ai.token.type", kind),)


_NO_GAPS = np.empty(0)


def observe(rec: object) -> Observation:
    """The values of a finished ``RequestRecord`` (any object with its fields)."""
    from loadgen.records import CANCELLED

    ok = bool(getattr(rec, "ok", False))
    error = getattr(rec, "error_class", None)
    send, end, first = (getattr(rec, k, None) for k in ("t_send_ns", "t_end_ns", "t_first_token_ns"))
    chunks: list[int] = getattr(rec, "chunk_times_ns", None) or []
    return Observation(
        ok=ok,
        outcome="ok" if ok else ("cancelled" if error == CANCELLED else "failed"),
        error_type=None if ok else (error or "unknown"),
        model=getattr(rec, "model", None),
        stage=int(getattr(rec, "stage", 0) or 0),
        warmup=bool(getattr(rec, "warmup", False)),
        e2e_s=(end - send) / 1e9 if ok and end is not None and send else None,
        ttft_s=(first - send) / 1e9 if ok and first is not None and send else None,
        gaps_s=np.diff(np.asarray(chunks, dtype=np.int64)) / 1e9 if ok and len(chunks) > 1 else _NO_GAPS,
        input_tokens=getattr(rec, "prompt_tokens", None) if ok else None,
        output_tokens=getattr(rec, "output_tokens", None) if ok else None,
    )
