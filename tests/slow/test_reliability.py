"""Reliability against a hostile server: every fault, through every transport, costs exactly its
own requests, each classified as intended, and never a traceback, a hang or a lost record.

The server is ``loadgen.testing.hostile.HostileServer`` (a raw asyncio TCP server in a thread,
one fault per mode). Each run is short (c=2-4, 2-10 requests, read timeout 1 s, request timeout
3 s, connect timeout 1 s) and is checked for:

- an end: the run returns within 15 s of wall time;
- no traceback: the run's event loop gets an exception handler that records everything asyncio
  would have logged (``Task exception was never retrieved``, a protocol callback that raised,
  an unclosed session), ``caplog`` holds no WARNING from the ``asyncio`` logger, and pytest's
  unraisable-exception warning is an error;
- exact accounting: one record per request sent (requests.jsonl too), as many as the server
  fully received when it received them all (a silent re-send would make it see more), and
  sent == ok + failed + cancelled with nothing cancelled;
- the intended class on every record (``INTENDED``), with the server's message where it sent one.

Credentials a server echoes back (in a 401 body, a response header, the response id) must reach
no file of the run folder, report files included: checked byte for byte (and cell by cell in the
Parquet file, whose pages are compressed), for a Bearer key and for Basic credentials in the URL.

One server per mode is shared by the three transports' runs (counts are compared as deltas), so
the module's servers start once; ``dies`` gets a fresh one per run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import logging
import os
import re
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from loadgen import records as R
from loadgen.errors import RunError
from loadgen.runner import api
from loadgen.testing.hostile import ERROR_MESSAGES, RETRY_AFTER_S, UNKNOWN_FIELD, HostileServer

import helpers
from helpers import assert_within

pytestmark = [
    pytest.mark.timing_absolute,  # every run ends within WALL_LIMIT_S (a hang detector)
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning"),
]

TRANSPORTS = ("httptools", "aiohttp", "httpx")
TOKENS = 4  # content events per stream (the requested max_tokens)
READ_TIMEOUT_S, TIMEOUT_S, CONNECT_TIMEOUT_S = 1.0, 3.0, 1.0
WALL_LIMIT_S = 15.0
OK = None  # the error_class of a request that succeeded

# The class every request of a run against each mode must end with (OK: it must succeed).
INTENDED: dict[str, str | None] = {
    "ok": OK,
    "http_500": "http_500",
    "http_429": "http_429",
    "reset_mid_stream": R.READ,
    "stall": R.TIMEOUT,
    "slow_headers": R.TIMEOUT,
    "garbage_lines": R.MALFORMED,
    "non_object_json": R.MALFORMED,
    "no_data_prefix": R.MALFORMED,
    "not_sse": R.MALFORMED,
    "no_done": OK,  # finish and usage, then a clean end: whole (stream_end no_terminator)
    "no_finish": R.NO_DONE,
    "unknown_field_422": "http_422",
    "fin_mid_chunk": R.READ,
    "invalid_utf8": R.MALFORMED,
    "huge_event": OK,
    "one_byte_writes": OK,
    "connection_close": OK,
    "error_event": R.SERVER_ERROR_EVENT,
    "object_error_event": R.SERVER_ERROR_EVENT,
    "no_usage": OK,
    "zero_tokens": OK,  # ok, but flagged by the summary (see _check_mode)
    "eof_body": OK,
    "typed_choices_str": R.MALFORMED,
    "typed_delta_str": R.MALFORMED,
    "typed_usage_null": R.MALFORMED,
    "tool_no_index": R.MALFORMED,
    "tool_args_not_string": R.MALFORMED,
    "tool_cut_mid_call": R.NO_DONE,
}
# (requests, concurrency) where the default (8, 4) would be slow: a timeout costs ~1 s per wave.
SIZES = {"stall": (4, 4), "slow_headers": (4, 4), "huge_event": (2, 2)}
# A 10 MB event is read and parsed well inside 3 s on a quiet machine, not on a loaded 2-core one
# (two at once through httpx went past it in CI): that mode is about its size, not its speed.
TIMEOUT_FOR = {"huge_event": 20.0}


# ----------------------------------------------------------------------------- harness
@pytest.fixture(scope="module")
def hostile():
    """``hostile(mode)``: the module's one server for ``mode`` (started on first use)."""
    with contextlib.ExitStack() as stack:
        servers: dict[str, HostileServer] = {}

        def get(mode: str) -> HostileServer:
            if mode not in servers:
                servers[mode] = stack.enter_context(HostileServer(mode))
            return servers[mode]

        yield get


def make_profile(tmp_path: Path, url: str, transport: str, n: int = 8, c: int | None = 4, **extra: Any):
    return helpers.profile(
        tmp_path,
        url,
        **{
            "target.transport": transport,
            "target.timeout_s": TIMEOUT_S,
            "target.read_timeout_s": READ_TIMEOUT_S,
            "target.connect_timeout_s": CONNECT_TIMEOUT_S,
            "workload.num_requests": n,
            "load.concurrency": c,
            "workload.input_tokens": 16,
            "workload.output_tokens": TOKENS,
            "server_metrics.enabled": False,
            # Each mode's fault is judged request by request against the server's own counts:
            # the unmeasured request before the load would be one more (the preflight's own
            # tests are in tests/loopback/test_preflight.py).
            "target.preflight": False,
            **extra,
        },
    )


class Outcome:
    """One watched run: its result (or the exception it raised), what asyncio would have
    logged, and how long it took."""

    def __init__(self, result: Any, error: BaseException | None, loop_errors: list[str], seconds: float):
        self.result, self.error, self.loop_errors, self.seconds = result, error, loop_errors, seconds


def watched_run(profile: Any, caplog: pytest.LogCaptureFixture, api_key: str | None = None) -> Outcome:
    """Run ``profile`` as ``loadgen run`` does (a fresh event loop), recording everything asyncio
    would log; a LoadgenError is returned in the outcome, anything else raises."""
    loop_errors: list[str] = []

    def on_error(loop: asyncio.AbstractEventLoop, ctx: dict) -> None:
        exc = ctx.get("exception")
        loop_errors.append(f"{ctx.get('message')}: {exc!r}" if exc is not None else str(ctx.get("message")))

    async def main() -> Any:
        asyncio.get_running_loop().set_exception_handler(on_error)
        return await api.run_async(profile, api_key=api_key)

    caplog.set_level(logging.WARNING, logger="asyncio")
    t0 = time.monotonic()
    result, error = None, None
    try:
        result = asyncio.run(main())
    except RunError as exc:
        error = exc
    seconds = time.monotonic() - t0
    gc.collect()  # a task whose exception nobody retrieved is reported when it is collected
    return Outcome(result, error, loop_errors, seconds)


def assert_clean(out: Outcome, caplog: pytest.LogCaptureFixture, srv: HostileServer | None = None) -> None:
    """The run ended in time, and neither asyncio nor the server itself had anything to report."""
    ended = f" (the records: {classes(out.result.records)})" if out.result is not None else ""
    assert_within(out.seconds, WALL_LIMIT_S, "the run ended after", unit="s")
    assert out.loop_errors == [], "asyncio would have logged: " + "; ".join(out.loop_errors) + ended
    logged = [
        f"[{r.threadName}] {r.getMessage()}"
        for r in caplog.records
        if r.name.startswith("asyncio") and r.levelno >= logging.WARNING
    ]
    assert logged == [], "asyncio logged: " + "; ".join(logged) + ended
    if srv is not None:
        assert srv.errors == [], f"the hostile server itself failed (a test bug): {srv.errors}"


def classes(records: list) -> str:
    """What the records ended as, for assertion messages: class x count, and one message each."""
    seen: dict[str | None, str | None] = {}
    for r in records:
        seen.setdefault(r.error_class, r.error_message)
    counts = Counter(r.error_class for r in records)
    return "; ".join(f"{k or 'ok'} x{counts[k]}" + (f" ({v})" if v else "") for k, v in seen.items())


def assert_accounting(res: Any, n: int) -> None:
    """One record per request, in memory and in requests.jsonl; sent == ok + failed + cancelled."""
    c = res.summary["counts"]
    assert len(res.records) == n
    assert c["sent"] == n
    assert c["sent"] == c["ok"] + c["failed"] + c["cancelled"]
    assert c["cancelled"] == 0
    assert res.summary["interrupted"] is False
    lines = (res.run_dir / "requests.jsonl").read_text().splitlines()
    assert len(lines) == n
    for r in res.records:
        assert r.t_end_ns is not None and r.t_end_ns >= r.t_send_ns
        if not r.ok:
            assert r.error_message, r


# ----------------------------------------------------------------------------- every fault
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", list(INTENDED))
def test_each_fault_costs_its_requests_their_intended_class(hostile, tmp_path, caplog, mode, transport):
    srv = hostile(mode)
    n, c = SIZES.get(mode, (8, 4))
    seen0, finished0 = srv.requests_seen, srv.streams_finished
    timeout = {"target.timeout_s": TIMEOUT_FOR[mode]} if mode in TIMEOUT_FOR else {}
    out = watched_run(make_profile(tmp_path, srv.url, transport, n=n, c=c, **timeout), caplog)
    assert out.error is None, f"the run failed to start: {out.error}"
    assert_clean(out, caplog, srv)
    res = out.result
    assert_accounting(res, n)
    # The server fully received every request exactly once: nothing lost, nothing re-sent.
    assert srv.requests_seen - seen0 == n
    want = INTENDED[mode]
    assert Counter(r.error_class for r in res.records) == {want: n}, classes(res.records)
    c_ = res.summary["counts"]
    if want is OK:
        assert (c_["ok"], c_["failed"]) == (n, 0)
        assert srv.streams_finished - finished0 == n
    else:
        assert (c_["ok"], c_["failed"]) == (0, n)
        assert c_["errors_by_class"] == {want: n}
    _check_mode(mode, res, n)


def _check_mode(mode: str, res: Any, n: int) -> None:
    """What each mode's records must say beyond their class."""
    recs = res.records
    if mode in ("http_500", "http_429"):
        code = int(mode[-3:])
        for r in recs:
            assert r.http_status == code
            assert ERROR_MESSAGES[code] in r.error_message, r.error_message
        if code == 429:
            assert [r.retry_after_s for r in recs] == [float(RETRY_AFTER_S)] * n
    elif mode in ("stall", "slow_headers"):
        # The read timeout (1 s) fired, not the request timeout (3 s), nor the server's late answer.
        for r in recs:
            took = (r.t_end_ns - r.t_send_ns) / 1e9
            assert took >= READ_TIMEOUT_S * 0.9, (took, r.error_message)
            assert_within(took, TIMEOUT_S - 0.5, f"{mode}: the read timeout fired after", unit="s")
        if mode == "stall":
            assert all(len(r.chunk_times_ns) == 1 for r in recs), [r.chunk_times_ns for r in recs]
    elif mode in ("error_event", "object_error_event"):
        for r in recs:
            assert "boom" in r.error_message, r.error_message
    elif mode == "unknown_field_422":
        # FastAPI's {"detail": ...}: the server's own words on the record, its fix in the summary.
        assert all(r.error_message == UNKNOWN_FIELD for r in recs), [r.error_message for r in recs]
        sample = res.summary["counts"]["error_samples"]["http_422"]
        assert sample["message"] == UNKNOWN_FIELD
        assert sample["hint"].startswith("the server does not take ignore_eos")
    elif mode == "no_finish":
        assert all("before any finish_reason" in r.error_message for r in recs)
    elif mode == "reset_mid_stream":
        assert all(len(r.chunk_times_ns) <= 2 for r in recs)
    elif mode == "zero_tokens":
        assert all(r.output_tokens == 0 and r.chunk_times_ns == [] for r in recs)
        anomalies = res.summary["counts"].get("anomalies") or {}
        assert anomalies.get("zero_output_tokens") == n, f"summary counts: {res.summary['counts']}"
    elif mode == "huge_event":
        for r in recs:
            assert len(r.chunk_times_ns) == 1 and r.output_tokens == 1, r
    elif INTENDED[mode] is OK:
        ends = res.summary["counts"]["stream_ends"]
        unmarked = n if mode == "no_done" else 0
        assert (ends["terminator"], ends["no_terminator"]) == (n - unmarked, unmarked), ends
        for r in recs:
            assert r.stream_end == (R.NO_TERMINATOR if mode == "no_done" else R.TERMINATOR)
            assert len(r.chunk_times_ns) == TOKENS and r.output_tokens == TOKENS, r
            assert r.token_source == ("chunks" if mode == "no_usage" else "usage")
            assert r.response_id and r.response_id.startswith("chatcmpl-hostile-")


# ----------------------------------------------------------------------------- the modes that need more
def assert_resends_match(res: Any, srv: HostileServer, unanswered0: int) -> int:
    """Every request ended ok; the records' re-sends are exactly the requests the server dropped
    unanswered, each said on its record (attempts 2, the reason) and counted in the summary."""
    assert Counter(r.error_class for r in res.records) == {OK: len(res.records)}, classes(res.records)
    resent = [r for r in res.records if r.attempts > 1]
    assert all(r.attempts == 2 and r.retry_reason for r in resent)
    assert all(r.attempts == 1 and r.retry_reason is None for r in res.records if r not in resent)
    dropped = srv.unanswered - unanswered0
    assert len(resent) == dropped, (len(resent), dropped)
    retries = res.summary["counts"].get("retries") or {}
    assert retries.get("requests", 0) == dropped, res.summary["counts"]
    return dropped


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_close_without_answer_is_resent_once_on_a_fresh_connection(hostile, tmp_path, caplog, transport):
    """Every 2nd request on a kept-alive connection is read whole and then the connection closes
    unanswered, the race no check before reuse can close: that request is sent once more on a
    new connection and succeeds; the server received it twice, and the record says so."""
    srv = hostile("close_without_answer")
    n = 8
    seen0, finished0, unanswered0 = srv.requests_seen, srv.streams_finished, srv.unanswered
    out = watched_run(make_profile(tmp_path, srv.url, transport, n=n, c=2), caplog)
    assert out.error is None, f"the run failed to start: {out.error}"
    assert_clean(out, caplog, srv)
    res = out.result
    assert_accounting(res, n)
    dropped = assert_resends_match(res, srv, unanswered0)
    assert dropped >= 2, classes(res.records)
    assert srv.requests_seen - seen0 == n + dropped
    assert srv.streams_finished - finished0 == n


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", ["close_after_response", "close_after_keepalive"])
def test_a_server_closing_after_every_response_loses_no_request(hostile, tmp_path, caplog, mode, transport):
    """llama-server's way: a normal response, then a FIN (with or without a Keep-Alive header
    promising more). Against it every request succeeds; a request that still raced the close is
    one the server saw arrive and dropped, and exactly those are re-sent."""
    srv = hostile(mode)
    n = 24
    finished0, unanswered0 = srv.streams_finished, srv.unanswered
    out = watched_run(make_profile(tmp_path, srv.url, transport, n=n, c=4), caplog)
    assert out.error is None, f"the run failed to start: {out.error}"
    assert_clean(out, caplog, srv)
    assert_accounting(out.result, n)
    assert_resends_match(out.result, srv, unanswered0)
    assert srv.streams_finished - finished0 == n


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_keep_alive_max_and_timeout_are_honoured(hostile, tmp_path, caplog, transport):
    """``Keep-Alive: timeout=1, max=3``: no connection carries a 4th request, and none is reused
    after an idle second (requests 1.25 s apart), though the server would still answer."""
    srv = hostile("keepalive_limits")
    violations0 = srv.limit_violations
    out = watched_run(make_profile(tmp_path, srv.url, transport, n=12, c=2), caplog)
    assert out.error is None and out.result.summary["counts"]["ok"] == 12
    assert_clean(out, caplog, srv)
    assert srv.limit_violations - violations0 == 0, "a 4th request went out on one connection"
    spaced = make_profile(
        tmp_path, srv.url, transport, n=3, c=None, **{"load.rate": 0.8, "load.arrival": "constant"}
    )
    out = watched_run(spaced, caplog)
    assert out.error is None and out.result.summary["counts"]["ok"] == 3
    assert srv.limit_violations - violations0 == 0, "an idle connection was reused past timeout=1"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_server_that_dies_mid_run(tmp_path, caplog, transport):
    """The server answers 3 requests, then on the 4th closes its listener and every connection:
    the answered ones succeed, the cut and unanswered ones fail as `read`, later ones as
    `connect`; every request sent has its one record and the run ends."""
    n, c, die_after = 10, 2, 3
    with HostileServer("dies", die_after=die_after) as srv:
        out = watched_run(make_profile(tmp_path, srv.url, transport, n=n, c=c), caplog)
        assert out.error is None, f"the run failed to start: {out.error}"
        assert_clean(out, caplog, srv)
        res = out.result
        assert_accounting(res, n)
        got = Counter(r.error_class for r in res.records)
        assert set(got) <= {OK, R.READ, R.CONNECT}, classes(res.records)
        assert srv.requests_seen == die_after + 1 and srv.unanswered == 1
        assert die_after - c + 1 <= got[OK] <= srv.streams_finished <= die_after, classes(res.records)
        # The unanswered request went out on a kept-alive connection: it is re-sent once, to a
        # listener that is gone (connect), and its record says both attempts.
        assert got[R.READ] + got[R.CONNECT] >= 2 and got[R.CONNECT] >= 1, classes(res.records)
        assert sum(r.attempts - 1 for r in res.records) <= 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_server_that_never_accepts_fails_the_start_cleanly(hostile, tmp_path, caplog, transport):
    """A listener whose queue is full drops the SYN: the probe's connect times out after
    connect_timeout_s and the run fails to start with a RunError naming the connect failure."""
    srv = hostile("never_accepts")
    out = watched_run(make_profile(tmp_path, srv.url, transport, n=4, c=2), caplog)
    assert_clean(out, caplog)
    assert out.result is None and out.error is not None, "the run started against a server that never accepts"
    assert re.search(r"cannot reach http://127\.0\.0\.1:\d+/v1/models \(connect", str(out.error)), str(
        out.error
    )
    assert_within(out.seconds, CONNECT_TIMEOUT_S + 5.0, "the failed start took", unit="s")


# ----------------------------------------------------------------------------- echoed credentials
def _leaks(run_dir: Path, needles: list[str]) -> list[str]:
    """Every (file, secret) where a secret appears in the run folder: raw bytes of every file,
    and every cell of the Parquet table (its pages are compressed, so bytes alone could miss it)."""
    hits = []
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits += [f"{path.relative_to(run_dir)}: {s}" for s in needles if s.encode() in data]
        if path.suffix == ".parquet":
            import pandas as pd

            text = pd.read_parquet(path).astype(str).to_csv(index=False)
            text += " ".join(map(str, pd.read_parquet(path).columns))
            hits += [f"{path.relative_to(run_dir)} (cells): {s}" for s in needles if s in text]
    return hits


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("auth", ["bearer", "basic"])
@pytest.mark.parametrize("mode", ["echo_auth_body", "echo_auth_header"])
def test_echoed_credentials_reach_no_file(hostile, tmp_path, caplog, monkeypatch, mode, auth, transport):
    """A server that echoes the Authorization header (in a 401 body; in a response header and the
    response id) gets its echo into no file of the run, reports included: the Bearer key from
    ``target.api_key_env``, or the password and base64 of Basic credentials in the URL."""
    from loadgen.report import write_report

    srv = hostile(mode)
    n = 4
    if auth == "bearer":
        key = "sk-hostile-" + secrets.token_hex(12)
        monkeypatch.setenv("LOADGEN_HOSTILE_KEY", key)
        profile = make_profile(
            tmp_path, srv.url, transport, n=n, c=2, **{"target.api_key_env": "LOADGEN_HOSTILE_KEY"}
        )
        api_key = os.environ["LOADGEN_HOSTILE_KEY"]  # as `loadgen run` reads it
        needles = [key]
    else:
        password = "secretpw"
        url = srv.url.replace("http://", "http://user:secretpw@")
        profile = make_profile(tmp_path, url, transport, n=n, c=2)
        api_key = None
        token = base64.b64encode(b"user:" + password.encode()).decode()
        needles = [password, token, token.rstrip("=")]
    seen0 = srv.requests_seen
    out = watched_run(profile, caplog, api_key=api_key)
    assert out.error is None, f"the run failed to start: {out.error}"
    assert_clean(out, caplog, srv)
    res = out.result
    assert_accounting(res, n)
    assert srv.requests_seen - seen0 == n
    want = "http_401" if mode == "echo_auth_body" else OK
    assert Counter(r.error_class for r in res.records) == {want: n}, classes(res.records)
    write_report(res.run_dir)
    for name in (
        "summary.json",
        "requests.jsonl",
        "requests.csv",
        "requests.parquet",
        "report.md",
        "report.html",
    ):
        assert (res.run_dir / name).is_file(), name
    leaks = _leaks(res.run_dir, needles)
    assert leaks == [], "the echoed credential reached: " + ", ".join(leaks)
