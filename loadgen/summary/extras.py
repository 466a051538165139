"""The blocks only some runs have: fidelity (the simulator's ground truth), quality, sessions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, with_config
from typing_extensions import NotRequired, TypedDict

from loadgen.summary.common import DOCS, Distribution


@with_config(DOCS)
class FidelityThresholds(TypedDict, total=True):
    """the bounds the verdict judged the lags against, ms"""

    first_token_lag_ms_p99_max: float
    """the verdict fails when first_token_lag_ms p99 is above this, ms"""
    chunk_lag_ms_p99_max: float
    """the verdict fails when chunk_lag_ms p99 is above this, ms"""


@with_config(DOCS)
class Fidelity(TypedDict, total=True):
    """runs the built-in simulator served only (absent for any other server): how far the client's own
    timestamps trail the simulator's ground truth (ground_truth.jsonl), matched per request by the
    response id the server gave it. Lag: the client's stamp minus the simulator's stamp of the same token,
    both perf_counter_ns on one monotonic clock (CLOCK_MONOTONIC, one per machine), ms: how far the
    client's timestamp trails the truth; never below zero on one clock. Error: the client's value minus
    the server's own value for the same request, ms (from the request's arrival at the server, so TTFT and
    E2E errors also hold the request's delivery)"""

    source: str
    """what was matched against, and how"""
    requests_matched: Annotated[int, Field(ge=0)]
    """measured ok streamed requests found in the ground truth by their response id"""
    requests_unmatched: Annotated[int, Field(ge=0)]
    """measured ok streamed requests with no ground-truth line (any fails the verdict)"""
    chunks_matched: Annotated[int, Field(ge=0)]
    """token-bearing chunks of the matched requests: the samples of chunk_lag_ms"""
    first_token_lag_ms: Distribution
    """per matched request: the client's first-token stamp minus the simulator's stamp of the first token
    (lag: client stamp minus the simulator's stamp of the same token on one monotonic clock), ms"""
    chunk_lag_ms: Distribution
    """per chunk the client recorded: its stamp minus the simulator's stamp of the last token the chunk held
    (a chunk cannot be complete before its last token was sent; lag on one monotonic clock), ms"""
    ttft_error_ms: Distribution
    """per matched request: the client's TTFT (first token minus send) minus the server's (first token minus
    the request's arrival), ms; holds the first-token lag plus the request's delivery"""
    tpot_error_ms: Distribution
    """per matched request with 2 or more output tokens: the client's TPOT minus the server's own, ms; may be
    negative"""
    e2e_error_ms: Distribution
    """per matched request: the client's E2E (end of stream minus send) minus the server's (finish minus
    arrival), ms"""
    thresholds: FidelityThresholds
    verdict: Literal["pass", "fail", "no_data"]
    """pass: every lag p99 within its threshold, every request matched, both clocks one; fail: see reasons;
    no_data: no request was matched"""
    reasons: list[str]
    """why the verdict failed, one sentence each (empty when it passed): unmatched requests, a lag p99 above
    its threshold, or a lag below zero (two clocks)"""


@with_config(DOCS)
class Quality(TypedDict, total=True):
    """the quality corner (present when some measured request carried an expected answer, or the run kept its
    answers: output.answers.keep / --keep-answers): how many answers were scored and right, and how many
    were kept in requests.jsonl for compare's output agreement (loadgen/analysis/traffic.py)"""

    scored: Annotated[int, Field(ge=0)]
    """measured ok requests that carried an expected answer (the built-in tasks, or a dataset's `expected`)"""
    correct: Annotated[int, Field(ge=0)]
    """of those, answers that matched (exact or contains, as the task or dataset says;
    loadgen/quality/score.py)"""
    accuracy: Annotated[float | None, Field(ge=0, le=1)]
    """correct / scored; null when nothing was scored (no expected answers)"""
    answers_kept: Annotated[int, Field(ge=0)]
    """measured ok requests whose answer text (the streamed pieces, `answer`) and prompt digest
    (`prompt_hash`) are in requests.jsonl; 0 when answers were not kept"""
    answers_truncated: Annotated[int, Field(ge=0)]
    """of the kept answers, those cut at max_chars (`answer_truncated`)"""
    max_chars: int | None
    """characters kept of each answer (output.answers.max_chars); null when answers were not kept"""
    modelled: NotRequired[dict[str, Any]]
    """present when the built-in simulator served the run and answered built-in tasks: its answers are
    modelled by the simulator, not measured. note (that sentence), accuracy (the share of right answers it
    was set to give), base_accuracy and base_source (the model's published score it starts from), weights
    and kv (each precision's retained share of that score and its source; loadgen/sim/answers.py)"""
    json_scored: NotRequired[Annotated[int, Field(ge=0)]]
    """structured output (workload.response_format): measured ok answers validated against its JSON schema"""
    json_valid_answers: NotRequired[Annotated[int, Field(ge=0)]]
    """of those, answers that parsed as JSON and were valid against the schema (jsonschema)"""
    json_valid: NotRequired[Annotated[float, Field(ge=0, le=1)]]
    """json_valid_answers / json_scored: the quality axis of structured output
    (loadgen/quality/structured.py)"""


@with_config(DOCS)
class SessionsByTurnTtftMs(TypedDict, total=False):
    """TTFT of the turn's measured ok requests, ms"""

    count: Annotated[int, Field(ge=0)]
    """number of samples"""
    mean: float | None
    """arithmetic mean"""
    p50: float | None
    """median"""
    p90: float | None
    """90th percentile"""
    p99: float | None
    """99th percentile"""


@with_config(DOCS)
class SessionsByTurn(TypedDict, total=True):
    """SessionsByTurn"""

    turn: int | str
    """turn number, 1 for a session's first request; "16+" for the row pooling turn 16 and later"""
    requests: Annotated[int, Field(ge=0)]
    """measured ok requests at this turn"""
    ttft_ms: SessionsByTurnTtftMs
    prompt_tokens_mean: float | None
    """mean prompt tokens of those requests (the history grows turn by turn); null when no count was known"""


@with_config(DOCS)
class Sessions(TypedDict, total=True):
    """multi-turn runs only (workload.sessions): how many conversations ran, how many turns each got, and
    TTFT by turn; a later turn resends the whole history, so with a prefix cache its TTFT should not grow
    with its prompt (loadgen/analysis/traffic.py)"""

    sessions: Annotated[int, Field(ge=0)]
    """distinct sessions among the measured requests"""
    turns_per_session: Distribution | None
    """measured turns per session (a count, not ms); null when no request was measured"""
    failed_turns: Annotated[int, Field(ge=0)]
    """measured turns that failed (a failed turn ends its session)"""
    by_turn: list[SessionsByTurn]
    """one row per turn number over the measured ok requests; turns from 16 on share the last row (turn
    "16+")"""
