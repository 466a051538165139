"""What a metric is: its definition (``MetricDef``), the stats every distribution carries, and
the per-request formula a distribution of requests summarizes (``Span``).

Why the formula sits here, beside the names: the same latency used to be computed in three
places (the summary, the client-vs-server means, the fidelity check) with three spellings of
one formula; a change to one (TPOT's first token, say) silently left the others behind. Each
now calls the entry's ``formula`` (or, for TPOT's shape, ``tpot_ms``) and picks its own rows.

Imports numpy and nothing of loadgen: a leaf every layer may import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

Kind = Literal["distribution", "run"]
# Which runs a metric describes: every run; a streamed protocol's only (a token's arrival
# times, output tokens: chat, completions, ...); or a pooling protocol's only (answered whole,
# a batch of items a request: embeddings, rerank). The backend says which its protocol is
# (``StreamingBackend.streamed``); a run's summary holds only the metrics that apply to it.
Applies = Literal["all", "streamed", "pooling"]
# What a distribution summarizes (measured = not warm-up): one value per ok measured request, or
# per measured request (ok or not), both its ``formula`` over the request's record; or the gaps
# between consecutive content chunks of ok requests, per chunk or shared among the tokens the
# later chunk carried (``analysis.metrics.itl_values``).
Samples = Literal["ok_requests", "measured_requests", "chunk_gaps", "token_gaps"]
PER_REQUEST_SAMPLES: tuple[Samples, ...] = ("ok_requests", "measured_requests")

PERCENTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99_9": 99.9}
# The keys of every distribution in summary.json, in their order there.
STATS: tuple[str, ...] = ("count", "mean", "std", "min", *PERCENTILES, "max")
# The stats an SLA rule may name with a distribution metric (and the SLA evaluation reads).
RULE_STATS: tuple[str, ...] = (*PERCENTILES, "mean", "max", "min")
# The stats a gate rule may name: those the bootstrap recomputes on resamples.
GATE_STATS: tuple[str, ...] = (*PERCENTILES, "mean")
# Columns of the report's latency table and the stat rows of compare's table, in order.
TABLE_STATS: tuple[str, ...] = (*PERCENTILES, "mean")
# Columns of the console's end-of-run latency table, in order.
CONSOLE_STATS: tuple[str, ...] = ("mean", *PERCENTILES, "max")

FloatArray = npt.NDArray[np.float64]
# Timestamps every record carries (the others are missing where the request never got there).
ALWAYS_PRESENT: frozenset[str] = frozenset({"t_sched_ns", "t_send_ns"})


class Columns(Protocol):
    """A run's records as columns, as a formula reads them (``analysis.table.RecordTable``)."""

    def column(self, name: str) -> npt.NDArray[Any]: ...

    def present(self, name: str) -> npt.NDArray[np.bool_]: ...


def tpot_ms(first_ns: Any, last_ns: Any, output_tokens: Any) -> Any:
    """Time per output token in ms: the first to the last content chunk, shared among the tokens
    after the first (arrays or numbers). Meaningful from 2 output tokens; below that the
    divisor is held at 1 so an array computes, and the caller masks those rows out."""
    return (last_ns - first_ns) / 1e6 / np.maximum(output_tokens - 1, 1)


@dataclass(frozen=True, slots=True)
class Span:
    """A per-request latency in ms: the record's timestamp ``end`` minus its timestamp ``start``
    (integer ns on one clock). Undefined (NaN) where either is missing, for a failed request
    when ``ok_only`` (a failure's "end" is its time to fail, not a latency), and with
    ``per_token`` (TPOT: divided among the output tokens after the first, ``tpot_ms``) for a
    request of fewer than 2 output tokens."""

    start: str
    end: str
    ok_only: bool = False
    per_token: bool = False

    def defined(self, t: Columns) -> npt.NDArray[np.bool_]:
        """Where the latency exists, one flag per record."""
        mask = np.ones(len(t.column(self.start)), dtype=bool)
        for name in (self.start, self.end):
            if name not in ALWAYS_PRESENT:
                mask &= t.present(name)
        if self.ok_only or self.per_token:
            mask &= t.column("ok").astype(bool)
        if self.per_token:
            mask &= t.present("output_tokens") & (t.column("output_tokens") >= 2)
        return mask

    def delta_ns(self, t: Columns) -> npt.NDArray[np.int64]:
        """``end - start`` of every record in integer ns (meaningless where not ``defined``): a
        sum of them divides exactly, as a mean of the ms values would not."""
        delta: npt.NDArray[np.int64] = t.column(self.end) - t.column(self.start)
        return delta

    def __call__(self, t: Columns) -> FloatArray:
        """One value per record (float64 ms, NaN where undefined)."""
        if self.per_token:
            value = tpot_ms(t.column(self.start), t.column(self.end), t.column("output_tokens"))
        else:
            value = self.delta_ns(t) / 1e6
        out: FloatArray = np.where(self.defined(t), value, np.nan)
        return out


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric: where it is in summary.json, how it is computed, named and shown, and which
    lists (SLA, gate, compare, console, report, curve, server comparison) it is a row of."""

    name: str  # its key in summary.json and the name rules use: "ttft_ms"
    kind: Kind  # "distribution": a dict of STATS; "run": one number per run
    path: tuple[str, ...]  # where it sits in summary.json
    unit: str  # "ms", "req/s", "tok/s", "requests" or "fraction" (shown as a percentage)
    label: str  # short name in tables: "TTFT", "output tokens/s"
    description: str
    higher_is_better: bool = False  # direction of "worse" for the gate's max_regression
    digits: int = 1  # decimals on the console (of the percentage, for a fraction)
    samples: Samples | None = None  # distributions only: what it summarizes
    # Per-request distributions (samples "ok_requests"/"measured_requests"): the value of each
    # request, a column of ``analysis.metrics.request_frame``.
    formula: Span | None = None
    title: str = ""  # longer name for plot titles and axes; the label when empty
    gate: bool = True  # a gate rule may bound it (resampled by the bootstrap, unless ``resampled``)
    # False: one number per run with no per-request samples to resample (GPU energy is one
    # counter difference over the window); the gate judges the summary's value itself.
    resampled: bool = True
    compare: bool = True  # rows in compare's table (distributions: TABLE_STATS rows, a CDF plot)
    console: bool = False  # distributions: a row of the console's latency table
    report: str | None = None  # the report table it is a row of: "latency", "throughput", "goodput"
    # A distribution that equals this other one when every request went out on time (a closed
    # loop, a client that kept up): the console's and the report's tables show it only when it
    # differs (``table_shows``), so a run without send lag does not show the same figures twice.
    same_as: str | None = None
    slo: bool = False  # a per-request SLO of the profile (sla.<name>): goodput counts against it
    curve: bool = False  # its p50/p90/p99 kept on each point of a multi-stage run's curve
    curve_plot: bool = False  # and plotted against throughput, a column of the report's stage table
    # The server's latency histogram (``server.metrics.HISTOGRAMS``) measuring the same quantity:
    # the client's mean is set beside the server's (``analysis.client_means``).
    server_histogram: str | None = None
    applies: Applies = "all"  # the runs it describes (see ``Applies``)

    def applies_to(self, streamed: bool) -> bool:
        """Whether a run of a streamed (or, False, a pooling) protocol has this metric."""
        return self.applies == "all" or (self.applies == "streamed") == streamed

    # Defined only for some requests' kind (a tool call), or for a run with a block others lack
    # (GPU telemetry): in summary.json, and a table row, only where some request has a sample
    # (some run has the block), so a run without it shows no empty row.
    when_present: bool = False

    @property
    def plot_title(self) -> str:
        return self.title or self.label
