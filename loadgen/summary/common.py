"""The shapes every block shares: a latency distribution, a length sample, a server histogram.

Why a package of types: summary.json is loadgen's contract with its users and CI, and the code
that builds it, renders it and compares it used to pass it around as ``dict[str, Any]``. Each
block is a TypedDict here, named once (structlog's ``typing.py`` habit), so mypy checks every
producer and reader against one layout, and ``loadgen.summary.schema`` generates
``schemas/summary.schema.json`` from these same classes. TypedDicts rather than pydantic models:
a summary is JSON, written and read back (by users, by ``load_summary``, from files of earlier
loadgen versions), and every reader indexes it like JSON; a TypedDict costs nothing at run time,
keeps that one access style from the builder to the renderer, and pydantic still validates a
loaded file against it (``schema.validate``). A leaf: imports nothing of loadgen.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

# Each field's description is the docstring under it (structlog's typing.py style): the schema
# generated from these types (loadgen.summary.schema) carries them.
DOCS = ConfigDict(use_attribute_docstrings=True)


@with_config(DOCS)
class ServerHistogram(TypedDict, total=False):
    """deltas of one server histogram across the run"""

    count: float
    """observations added during the run"""
    sum_s: float
    """seconds added to the histogram's sum"""
    mean_ms: float | None
    """sum delta / count delta, in ms"""


@with_config(DOCS)
class ClientVsServer(TypedDict, total=False):
    """one client statistic beside the server's"""

    client_mean_ms: float
    """the client's mean over every ok request, warm-up included"""
    server_mean_ms: float
    """the server histogram's mean over the run"""
    difference_ms: float
    """client minus server: HTTP, network and client overhead"""


@with_config(DOCS)
class Distribution(TypedDict, total=True):
    """Summary statistics of a latency sample in milliseconds (numpy linear-interpolation percentiles,
    population std). count 0: every other stat is null."""

    count: Annotated[int, Field(ge=0)]
    """number of samples"""
    mean: float | None
    """arithmetic mean"""
    std: float | None
    """population standard deviation (ddof=0)"""
    min: float | None
    """smallest sample"""
    p50: float | None
    """median"""
    p90: float | None
    """90th percentile"""
    p95: float | None
    """95th percentile"""
    p99: float | None
    """99th percentile"""
    p99_9: float | None
    """99.9th percentile"""
    max: float | None
    """largest sample"""


@with_config(DOCS)
class LengthStats(TypedDict, total=True):
    """count, mean, std, min, p50, p90, p99, max of a length sample (null stats when count is 0)"""

    count: Annotated[int, Field(ge=0)]
    """number of values"""
    mean: float | None
    """mean"""
    std: float | None
    """std"""
    min: float | None
    """min"""
    p50: float | None
    """p50"""
    p90: float | None
    """p90"""
    p99: float | None
    """p99"""
    max: float | None
    """max"""
