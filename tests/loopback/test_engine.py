"""The engine end to end against a scripted server on a real loopback socket.

Every timing assertion compares loadgen's record with the server's own log of when it handed
each event to the socket (same monotonic clock, matched by response id). The tolerances are
stated per test; they are loose enough for a busy 2-core CI machine and tight enough that
timestamping after parsing, or stamping the role-only chunk, would fail them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen import load_run
from loadgen import records as R
from loadgen.result import load_summary

from helpers import assert_percentiles, assert_within, run

MS = 1e6
TRANSPORTS = ("httptools", "aiohttp", "httpx")


def trail_ms(rec, log):
    """How far each client chunk timestamp trails the server's send of the same event (ms)."""
    gt = log[rec.response_id]
    assert len(rec.chunk_times_ns) == len(gt["chunk_ns"])
    return (np.array(rec.chunk_times_ns) - np.array(gt["chunk_ns"])) / MS


class TestTimingAgainstServerLog:
    @pytest.mark.timing_absolute
    @pytest.mark.slow
    @pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
    def test_concurrency_1_chunks_trail_the_server_by_under_2ms(self, server, make_profile):
        """At c=1 chunks are stamped 0-2 ms (p95; p50 under 0.5 ms) after the server sent them,
        TTFT exceeds the server's own by under 2 ms (median; 5 ms max), ITL and TPOT match."""
        res = run(
            make_profile(
                server.url,
                load__concurrency=1,
                workload__num_requests=10,
                workload__output_tokens=20,
                load__warmup_requests=2,
            )
        )
        log = server.log()
        measured = [r for r in res.records if not r.warmup]
        trails = np.concatenate([trail_ms(r, log) for r in measured])
        assert trails.min() >= 0.0  # never before the server sent it: one clock
        assert_percentiles(trails, "c=1 chunk trail", p50=0.5, p95=2.0)
        itl_err, ttft_excess = [], []
        for r in measured:
            gt = log[r.response_id]
            # Server-side TTFT counts from when it read the request; ours from just before we
            # sent it, so ours is longer by the request's trip: small but never negative.
            ours = (r.t_first_token_ns - r.t_send_ns) / MS
            theirs = (gt["first_token_ns"] - gt["recv_ns"]) / MS
            ttft_excess.append(ours - theirs)
            assert ours >= 50.0
            itl_err.append(np.diff(r.chunk_times_ns) / MS - np.diff(gt["chunk_ns"]) / MS)
        assert min(ttft_excess) >= 0
        # The excess is the request's delivery plus the first event's trail: 0.6-1.05 ms here.
        assert_percentiles(ttft_excess, "c=1 TTFT excess over the server's", p50=2.0, max=5.0)
        assert_percentiles(np.abs(np.concatenate(itl_err)), "c=1 |ITL error|", p50=0.5, p95=2.0)
        tpot = res.summary["metrics"]["tpot_ms"]
        assert tpot["count"] == 10
        assert tpot["mean"] > 9.9  # the server's 10 ms between tokens
        assert_within(tpot["mean"], 11.0, "c=1 mean TPOT (the server's: 10 ms)")

    @pytest.mark.timing_absolute
    @pytest.mark.slow
    @pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
    def test_concurrency_64_still_tracks_the_server(self, server, make_profile):
        """At c=64 (one process, 64 streams of 10 ms tokens) chunks trail by p50 < 2 ms, p99 < 15 ms."""
        res = run(
            make_profile(
                server.url, load__concurrency=64, workload__num_requests=128, workload__output_tokens=32
            )
        )
        assert res.summary["counts"]["ok"] == 128
        log = server.log()
        trails = np.concatenate([trail_ms(r, log) for r in res.records])
        assert trails.min() >= 0.0
        assert_percentiles(trails, "c=64 chunk trail", p50=2.0, p99=15.0)

    def test_role_only_first_chunk_is_not_the_first_token(self, server, make_profile):
        """The role-only delta arrives at once; TTFT waits for the first content (>= 50 ms)."""
        res = run(make_profile(server.url, workload__num_requests=4))
        ttft = res.summary["metrics"]["ttft_ms"]
        ttfb = res.summary["metrics"]["ttfb_ms"]
        assert ttft["min"] >= 50.0
        assert ttfb["max"] < ttft["min"]  # the role chunk is the first byte, before any first token

    def test_reasoning_chunks_are_timed_separately(self, server, make_profile):
        """reasoning_content deltas are token chunks of their own kind; the answer starts later."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                workload__output_tokens=10,
                target__extra_body={"loadgen_test": {"reasoning_tokens": 4}},
            )
        )
        for r in res.records:
            assert len(r.reasoning_times_ns) == 4
            assert r.t_first_token_ns == r.reasoning_times_ns[0]
            assert r.t_first_content_ns == r.chunk_times_ns[4]
        assert res.summary["metrics"]["reasoning"]["requests"] == 2


class TestTokenCounting:
    def test_multi_token_chunks_counted_from_continuous_usage(self, server, make_profile):
        """Events carrying 1, 3, 2 tokens are counted as such when the server reports usage per chunk."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                workload__output_tokens=12,
                target__continuous_usage_stats=True,
                target__extra_body={"loadgen_test": {"tokens_per_chunk": [1, 3, 2]}},
            )
        )
        for r in res.records:
            assert r.chunk_tokens == [1, 3, 2, 1, 3, 2]
            assert r.output_tokens == 12
            assert r.token_source == "continuous_usage"
        # 12 tokens over 6 chunks: TPOT spreads the 5 gaps over 11 tokens, not 5.
        r = res.records[0]
        assert res.frame().loc[0, "tpot_ms"] == pytest.approx(
            (r.chunk_times_ns[-1] - r.t_first_token_ns) / 11 / MS
        )

    def test_final_usage_gives_output_tokens_when_chunks_merge(self, server, make_profile):
        """Without per-chunk usage, the final usage block still gives the true output length."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                workload__output_tokens=12,
                target__extra_body={"loadgen_test": {"tokens_per_chunk": 3}},
            )
        )
        for r in res.records:
            assert len(r.chunk_times_ns) == 4
            assert r.output_tokens == 12
            assert r.token_source == "usage"

    def test_requested_and_realised_lengths_are_recorded(self, server, make_profile):
        """Each record keeps what was asked (max_tokens) and what the server produced."""
        res = run(make_profile(server.url, workload__num_requests=3, workload__output_tokens=7))
        assert [(r.requested_output_tokens, r.output_tokens) for r in res.records] == [(7, 7)] * 3
        assert all(r.prompt_tokens_source == "usage" for r in res.records)


class TestFailures:
    @pytest.mark.parametrize(
        "fail,cls",
        [
            ("status:500", "http_500"),
            ("status:429", "http_429"),
            ("reset_after:3", R.READ),
            ("malformed_after:2", R.MALFORMED),
            ("garbage", R.MALFORMED),
            ("error_event_after:2", R.SERVER_ERROR_EVENT),
        ],
    )
    @pytest.mark.parametrize("transport", TRANSPORTS)
    def test_each_failure_costs_only_its_request(self, server, make_profile, fail, cls, transport):
        """Every scripted failure is classified, counted, and the run carries on to the end,
        whichever HTTP transport carries it."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=4,
                target__transport=transport,
                target__extra_body={"loadgen_test": {"fail": fail}},
            )
        )
        c = res.summary["counts"]
        assert (c["sent"], c["ok"], c["failed"], c["cancelled"]) == (4, 0, 4, 0)
        assert c["errors_by_class"] == {cls: 4}
        assert c["error_rate"] == 1.0
        assert all(r.t_end_ns is not None and r.error_message for r in res.records)

    @pytest.mark.parametrize("transport", TRANSPORTS)
    def test_a_finished_stream_without_done_is_ok_and_counted(self, server, make_profile, transport):
        """The finish_reason and the usage chunk came, then a clean close without data: [DONE]
        (as transformers serve ends every stream): the answer is whole, so the request is ok, its
        record says how the stream ended and the summary counts it; require_done keeps the strict
        check for a conformance test."""
        kw = dict(
            workload__num_requests=4,
            target__transport=transport,
            target__extra_body={"loadgen_test": {"fail": "no_done"}},
        )
        res = run(make_profile(server.url, **kw))
        c = res.summary["counts"]
        assert (c["ok"], c["failed"]) == (4, 0)
        assert c["stream_ends"] == {"terminator": 0, "no_terminator": 4, "end_of_body": 0}
        assert [r.stream_end for r in res.records] == [R.NO_TERMINATOR] * 4
        assert [r.output_tokens for r in res.records] == [r.requested_output_tokens for r in res.records]
        strict = run(make_profile(server.url, target__require_done=True, target__preflight=False, **kw))
        assert strict.summary["counts"]["errors_by_class"] == {R.NO_DONE: 4}
        assert all("target.require_done is set" in r.error_message for r in strict.records)

    @pytest.mark.parametrize("transport", TRANSPORTS)
    def test_stalled_stream_times_out(self, server, make_profile, transport):
        """A server that stops mid-stream costs that request a `timeout` after timeout_s."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                target__timeout_s=0.5,
                target__transport=transport,
                target__extra_body={"loadgen_test": {"fail": "stall_after:2"}},
            )
        )
        assert res.summary["counts"]["errors_by_class"] == {R.TIMEOUT: 2}
        for r in res.records:
            assert 0.5 <= (r.t_end_ns - r.t_send_ns) / 1e9 < 1.5
            assert len(r.chunk_times_ns) == 2

    @pytest.mark.parametrize("transport", TRANSPORTS)
    def test_connection_refused_is_a_clear_error_before_the_load(self, make_profile, transport):
        """An unreachable target fails the run up front with a message naming the URL."""
        from loadgen.errors import RunError

        with pytest.raises(RunError, match=r"cannot reach http://127.0.0.1:9/v1/models \(connect"):
            run(make_profile("http://127.0.0.1:9", target__transport=transport))

    @pytest.mark.slow
    @pytest.mark.parametrize("transport", TRANSPORTS)
    def test_read_timeout_between_bytes(self, server, make_profile, transport):
        """A stream silent for longer than read_timeout_s fails as `timeout` well before timeout_s."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=2,
                target__read_timeout_s=0.5,
                target__timeout_s=30.0,
                target__transport=transport,
                target__extra_body={"loadgen_test": {"fail": "stall_after:1"}},
            )
        )
        assert res.summary["counts"]["errors_by_class"] == {R.TIMEOUT: 2}
        for r in res.records:
            assert 0.5 <= (r.t_end_ns - r.t_send_ns) / 1e9 < 2.0


class TestConnections:
    @pytest.mark.parametrize("transport", TRANSPORTS)
    def test_connections_are_kept_alive_and_reused(self, server, make_profile, transport):
        """A closed loop of 2 slots sends its 12 requests over 2 connections, not 12: a new
        connection per request would add its setup to every TTFT (and exhaust ports)."""
        res = run(make_profile(server.url, workload__num_requests=12, target__transport=transport))
        log = server.log()
        ports = {log[r.response_id]["peer_port"] for r in res.records}
        assert len(ports) == 2


class TestDriver:
    @pytest.mark.timing_absolute
    @pytest.mark.slow
    @pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
    def test_open_loop_follows_the_seeded_schedule(self, server, make_profile):
        """Each request is stamped with its absolute deadline and sent within 0.5 ms of it (p50),
        2 ms (p95)."""
        from loadgen.workload import build_schedule

        p = make_profile(server.url, load__rate=50.0, load__concurrency=None, workload__num_requests=40)
        res = run(p)
        offsets = build_schedule(p.load, p.workload)
        recs = sorted(res.records, key=lambda r: r.id)
        t0 = recs[0].t_sched_ns - int(offsets[0])
        assert [r.t_sched_ns - t0 for r in recs] == [int(o) for o in offsets[:40]]
        lag = np.array([r.t_send_ns - r.t_sched_ns for r in recs]) / MS
        assert lag.min() >= 0
        assert_percentiles(lag, "open-loop send lag", p50=0.5, p95=2.0)

    def test_concurrency_cap_wait_shows_as_client_lag(self, server, make_profile):
        """With 1 slot and 100 req/s offered, requests queue behind the cap: lag grows, not hides."""
        res = run(
            make_profile(
                server.url,
                load__rate=100.0,
                load__concurrency=None,
                load__max_concurrency=1,
                load__arrival="constant",
                workload__num_requests=5,
            )
        )
        recs = sorted(res.records, key=lambda r: r.id)
        # One slot: each request waits for the one before to end, measured here, so its lag is at
        # least that wait (~130 ms of service each against a schedule 10 ms apart): it grows.
        for before, r in zip(recs, recs[1:]):
            assert r.t_send_ns >= before.t_end_ns
            assert (
                r.t_send_ns - r.t_sched_ns
                >= before.t_end_ns - r.t_sched_ns
                > before.t_send_ns - before.t_sched_ns
            )
        client = res.summary["client"]
        assert [w["warning"] for w in client["warnings"]][-1] == "schedule_slip"
        # The cap, not a slow client, held them back: the send lag is no client_limited reason
        # (whether this machine's own loop lag made the client limited is not this test's point).
        limited = [w["reasons"] for w in client["warnings"] if w["warning"] == "client_limited"]
        assert not any(r.startswith("requests sent late") for reasons in limited for r in reasons)

    def test_warmup_requests_are_recorded_but_excluded(self, server, make_profile):
        """Warm-up requests appear in requests.jsonl flagged, and in no statistic."""
        res = run(make_profile(server.url, workload__num_requests=6, load__warmup_requests=2))
        assert sum(r.warmup for r in res.records) == 2
        assert res.summary["counts"]["sent"] == 6
        assert res.summary["counts"]["warmup"] == 2
        assert res.summary["metrics"]["ttft_ms"]["count"] == 6

    def test_duration_stops_dispatch(self, server, make_profile):
        """A 0.5 s duration at c=2 sends only what fits (each request ~120 ms), then drains."""
        res = run(make_profile(server.url, workload__num_requests=None, workload__duration_s=0.5))
        n = len(res.records)
        assert 6 <= n <= 12
        assert res.summary["counts"]["ok"] == n

    def test_stop_cancels_in_flight_and_still_writes_everything(self, server, make_profile):
        """Setting the stop event mid-run cancels in-flight requests, records them as
        cancelled, and writes a summary consistent with requests.jsonl."""
        import asyncio

        from loadgen.runner import api

        p = make_profile(
            server.url, workload__num_requests=1000, load__concurrency=4, workload__output_tokens=50
        )

        async def main():
            stop = asyncio.Event()

            def stop_after_four(progress):  # mid-run by the run's own count, not a wall-clock guess
                if progress.live.done >= 4:
                    stop.set()

            return await api.run_async(p, stop=stop, on_progress=stop_after_four)

        res = asyncio.run(main())
        c = res.summary["counts"]
        assert res.summary["interrupted"] is True
        assert c["cancelled"] == 4
        assert c["ok"] >= 4
        assert c["sent"] == c["ok"] + c["failed"] + c["cancelled"] == len(res.records)
        lines = (res.run_dir / "requests.jsonl").read_text().splitlines()
        assert len(lines) == c["sent"]


class TestResultFiles:
    def test_summary_and_requests_agree(self, server, make_profile):
        """summary.json has every documented field and its counts match requests.jsonl."""
        res = run(
            make_profile(
                server.url,
                workload__num_requests=10,
                load__warmup_requests=2,
                sla__ttft_ms=1000.0,
                sla__rules=["p99 ttft_ms < 1000"],
                labels={"gpu": "none"},
            )
        )
        s = load_summary(res.run_dir)
        for key in (
            "schema_version",
            "run_id",
            "started_at",
            "ended_at",
            "conditions",
            "counts",
            "window",
            "metrics",
            "sla",
        ):
            assert key in s
        for key in ("target", "server", "profile", "seed", "client", "host", "labels"):
            assert key in s["conditions"]
        for key in (
            "ttft_ms",
            "ttfb_ms",
            "itl_ms",
            "itl_per_token_ms",
            "tpot_ms",
            "e2e_ms",
            "client_lag_ms",
            "request_throughput_rps",
            "input_tokens_per_s",
            "output_tokens_per_s",
            "total_tokens_per_s",
            "mean_concurrency",
            "littles_law",
            "goodput",
        ):
            assert key in s["metrics"]
        assert s["conditions"]["labels"] == {"gpu": "none"}
        assert s["conditions"]["server"]["models"]["data"][0]["id"] == "test-model"
        assert s["sla"]["verdict"] == "pass"
        df = load_run(res.run_dir)
        assert len(df) == 12
        assert int((~df["warmup"]).sum()) == s["counts"]["sent"] == 10
        assert int(df["ok"].sum()) == 12
        lines = [json.loads(x) for x in (res.run_dir / "requests.jsonl").read_text().splitlines()]
        for field in (
            "id",
            "warmup",
            "ok",
            "error_class",
            "http_status",
            "response_id",
            "t_sched_ns",
            "t_send_ns",
            "t_first_byte_ns",
            "t_first_token_ns",
            "t_end_ns",
            "chunk_times_ns",
            "chunk_tokens",
            "prompt_tokens",
            "output_tokens",
            "requested_output_tokens",
        ):
            assert field in lines[0]

    def test_secrets_never_reach_result_files(self, server, make_profile, tmp_path):
        """The API key, credentials in the URL and secret headers are absent from every file."""
        secret = "sk-test-SECRET-0123456789"
        p = make_profile(
            server.url,
            workload__num_requests=2,
            target__headers={"X-Api-Key": "HEADERSECRET", "X-Trace": "visible"},
        )
        res = run(p, api_key=secret)
        text = "".join(f.read_text() for f in res.run_dir.iterdir())
        for s in (secret, "HEADERSECRET"):
            assert s not in text
        assert "visible" in text
        res = run(
            make_profile(server.url.replace("http://", "http://user:hunter2pass@"), workload__num_requests=2)
        )
        text = "".join(f.read_text() for f in res.run_dir.iterdir())
        assert res.summary["counts"]["ok"] == 2
        assert "hunter2pass" not in text and "http://***@127.0.0.1" in text


class TestClientHealth:
    @pytest.mark.slow
    def test_a_blocked_event_loop_is_reported_as_client_limited(self, server, make_profile):
        """When the client's own loop stalls (here a progress callback that blocks 30 ms), the
        summary says the client limited the run, with the lag it measured."""
        import time

        res = run(
            make_profile(server.url, workload__num_requests=20, workload__output_tokens=16),
            on_progress=lambda _p: time.sleep(0.03),
        )
        client = res.summary["client"]
        assert client["client_limited"] is True
        assert client["event_loop_lag_ms"]["max"] >= 10.0
        warning = client["warnings"][0]
        assert warning["warning"] == "client_limited"
        assert any("event-loop lag" in r for r in warning["reasons"])

    def test_a_healthy_client_raises_no_warning(self, server, make_profile):
        """A light run (c=2, 10 ms tokens) leaves the client far from its limits: no warning."""
        res = run(make_profile(server.url, workload__num_requests=10, workload__output_tokens=16))
        client = res.summary["client"]
        assert client["client_limited"] is False
        assert client["warnings"] == []
        assert client["cpu_busy_fraction"] < 0.5


@pytest.fixture(scope="module")
def tok_server():
    """A scripted server that offers /tokenize with its own (toy) tokenizer."""
    from loadgen.testing import StreamServer

    with StreamServer(ttft_ms=5, itl_ms=1, tokenize=True) as s:
        yield s


class TestServerTokenize:
    @pytest.mark.parametrize("endpoint", ["chat", "completions"])
    def test_prompts_fit_the_servers_tokenizer_exactly(self, tok_server, make_profile, endpoint):
        """With /tokenize on the server, every prompt's realised length (the server's
        usage.prompt_tokens) equals the requested length, chat template included."""
        res = run(
            make_profile(
                tok_server.url,
                workload__num_requests=12,
                target__endpoint=endpoint,
                workload__input_tokens={"kind": "uniform", "min": 20, "max": 300},
            )
        )
        assert all(r.prompt_tokens == r.requested_prompt_tokens for r in res.records)
        assert len({r.requested_prompt_tokens for r in res.records}) > 3
        cond = res.summary["conditions"]
        assert cond["prompt_lengths"]["method"] == "server /tokenize"
        assert cond["prompt_lengths"]["exact"] == 12
        assert cond["prompt_lengths_approximate"] is False

    def test_a_rate_over_a_duration_fits_what_it_can_plausibly_send(self, tok_server, make_profile):
        """20 req/s for 1 s: the Poisson count's mean plus five standard deviations (and one)
        are fitted, 44, not FIT_LIMIT; every request sent is exact."""
        res = run(
            make_profile(
                tok_server.url,
                workload__num_requests=None,
                workload__duration_s=1.0,
                load__concurrency=None,
                load__rate=20.0,
                load__warmup_requests=0,
            )
        )
        lengths = res.summary["conditions"]["prompt_lengths"]
        assert lengths["requests_fitted"] == 44 == lengths["exact"]
        assert "budget_s" not in lengths and len(res.records) < 44
        assert all(r.prompt_tokens == r.requested_prompt_tokens for r in res.records)

    def test_a_closed_loop_over_a_duration_fits_within_the_budget(
        self, tok_server, make_profile, monkeypatch
    ):
        """A duration-bounded closed loop has no plausible count: fitting stops at the time
        budget (here 0.3 s) instead of FIT_LIMIT; the fitted ones are requests 0..k-1 and
        exact, and the conditions say where approximation starts."""
        from loadgen.server import fit

        monkeypatch.setattr(fit, "FIT_BUDGET_S", 0.3)
        res = run(
            make_profile(
                tok_server.url,
                workload__num_requests=None,
                workload__duration_s=0.5,
                load__concurrency=2,
                load__warmup_requests=0,
            )
        )
        lengths = res.summary["conditions"]["prompt_lengths"]
        k = lengths["requests_fitted"]
        assert 0 < k < fit.FIT_LIMIT and lengths["budget_s"] == 0.3
        assert lengths["note"] == f"requests past {k} keep approximate lengths"
        assert all(r.prompt_tokens == r.requested_prompt_tokens for r in res.records if r.id < k)

    def test_without_tokenize_lengths_are_flagged_approximate(self, server, make_profile):
        """A server without /tokenize leaves the word approximation, and the result says so."""
        res = run(make_profile(server.url, workload__num_requests=2))
        cond = res.summary["conditions"]
        assert cond["prompt_lengths_approximate"] is True
        assert cond["prompt_lengths"]["server_tokenize"] == "not offered by the server"

    def test_server_identity_and_context_overflow(self, tok_server, make_profile):
        """The conditions name the served model and its context length, and count requests
        whose prompt plus output would not fit it."""
        res = run(make_profile(tok_server.url, workload__num_requests=2))
        ident = res.summary["conditions"]["server"]["identity"]
        assert ident["served_model"] == "test-model"
        assert ident["max_model_len"] == 32768
        assert ident["engine"] == "loadgen-testing"
        assert ident["requests_over_max_model_len"] == 0


class TestNoFullCollectionDuringLoad:
    @pytest.mark.timing_absolute
    @pytest.mark.slow
    @pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
    def test_old_objects_are_frozen_while_the_load_runs(
        self, server, make_profile, monkeypatch, unfrozen_heap
    ):
        """A full garbage collection walks every object in the process and stalled the event
        loop ~50 ms mid-run; with the pre-run objects frozen, none that long happens in the load."""
        import gc
        import time as _time

        from loadgen.runner import driver, fleet

        pauses, start, window = [], {}, {}

        def on_gc(phase, info):
            if phase == "start":
                start["t"] = _time.perf_counter_ns()
            elif window.get("open"):
                pauses.append((info["generation"], (_time.perf_counter_ns() - start["t"]) / MS))

        async def watched(*args, **kwargs):
            assert gc.get_freeze_count() > 0  # the process's old objects are out of the scans
            window["open"] = True
            try:
                return await driver.drive(*args, **kwargs)
            finally:
                window["open"] = False

        monkeypatch.setattr(fleet, "drive", watched)
        gc.callbacks.append(on_gc)
        try:
            res = run(
                make_profile(
                    server.url,
                    workload__num_requests=200,
                    load__concurrency=32,
                    workload__output_tokens=64,
                    target__extra_body={"loadgen_test": {"ttft_ms": 0, "itl_ms": 0}},
                )
            )
        finally:
            gc.callbacks.remove(on_gc)
        assert res.summary["counts"]["ok"] == 200
        assert gc.get_freeze_count() == 0  # unfrozen afterwards
        assert pauses, "the load allocates: some young collections must have run"
        assert_within(max(d for _, d in pauses), 10.0, "longest collection pause during the load")
