"""Metric definitions pinned on tiny literal records (docs/metrics.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import orjson
import pytest

from loadgen.analysis.metrics import (
    client_limits,
    distribution,
    itl_values,
    request_frame,
    summarize,
)
from loadgen.metric_defs import STATS
from loadgen.records import RequestRecord

from helpers import MS, failed_record, ok_record


@dataclass
class Rule:
    """Stand-in for profile.SlaRule (duck-typed by metrics)."""

    metric: str
    stat: str | None
    op: str
    threshold: float

    def text(self) -> str:
        name = f"{self.stat} {self.metric}" if self.stat else self.metric
        return f"{name} {self.op} {self.threshold:g}"


@dataclass
class Sla:
    """Stand-in for profile.SlaConfig (duck-typed by metrics)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    rules: list = field(default_factory=list)
    max_error_rate: float = 0.01


def span_record(id, send_ms, end_ms, tokens=2) -> RequestRecord:
    """An ok request occupying [send, end] with `tokens` one-token chunks ending at end."""
    gap = 1
    first = end_ms - gap * (tokens - 1)
    return ok_record(
        id=id,
        send_ms=send_ms,
        ttft_ms=first - send_ms,
        gaps_ms=(gap,) * (tokens - 1),
        tokens=(1,) * tokens,
        end_after_last_ms=0,
    )


class TestDistribution:
    def test_percentiles_of_one_to_hundred(self):
        """Percentiles use numpy linear interpolation: p50 of 1..100 is 50.5, p99 is 99.01."""
        d = distribution(np.arange(1, 101))
        assert tuple(d) == STATS
        assert d["count"] == 100
        assert d["min"] == 1.0 and d["max"] == 100.0 and d["mean"] == 50.5
        assert d["p50"] == 50.5
        assert d["p90"] == pytest.approx(90.1, abs=1e-12)
        assert d["p95"] == pytest.approx(95.05, abs=1e-12)
        assert d["p99"] == pytest.approx(99.01, abs=1e-12)
        assert d["p99_9"] == pytest.approx(99.901, abs=1e-12)
        assert d["std"] == pytest.approx(math.sqrt((100**2 - 1) / 12))

    def test_empty_gives_count_zero_and_none(self):
        """No values: count 0 and None for every other stat."""
        assert distribution([]) == {"count": 0, **{k: None for k in STATS[1:]}}

    def test_nan_values_are_dropped(self):
        """NaN marks "undefined for this request" and is not a sample."""
        d = distribution([1.0, float("nan"), 3.0])
        assert d["count"] == 2 and d["mean"] == 2.0

    def test_values_are_python_types(self):
        """Results are plain python floats and ints, not numpy scalars."""
        d = distribution(np.array([1, 2], dtype=np.int64))
        assert type(d["count"]) is int and type(d["p50"]) is float


class TestRequestFrame:
    def test_derived_columns_with_multi_token_chunks(self):
        """TTFT 100 ms, TTFB 80 ms, E2E 135 ms, TPOT = 30 ms / (6 - 1) tokens = 6 ms."""
        row = request_frame([ok_record(sched_ms=-2)]).iloc[0]
        assert row["ttft_ms"] == 100.0
        assert row["ttfb_ms"] == 80.0
        assert row["e2e_ms"] == 135.0
        assert row["tpot_ms"] == 6.0
        assert row["client_lag_ms"] == 2.0

    def test_columns_are_scalar_fields_plus_derived(self):
        """List fields (chunk times and tokens) are not columns; scalar fields all are."""
        cols = list(request_frame([ok_record()]).columns)
        assert "chunk_times_ns" not in cols and "chunk_tokens" not in cols
        assert "n_chunks" not in cols
        assert {"id", "ok", "error_class", "t_end_ns", "output_tokens", "token_source"} <= set(cols)
        assert cols[-8:] == [  # the registry's per-request distributions, in its order
            "ttft_ms",
            "ttfb_ms",
            "tpot_ms",
            "e2e_ms",
            "client_lag_ms",
            "ttft_from_sched_ms",
            "e2e_from_sched_ms",
            "ttft_tool_ms",
        ]

    def test_one_token_request_has_no_tpot(self):
        """TPOT is undefined for fewer than 2 output tokens."""
        row = request_frame([ok_record(gaps_ms=(), tokens=(1,))]).iloc[0]
        assert math.isnan(row["tpot_ms"])

    def test_failed_request_has_no_e2e(self):
        """A failure's end is time-to-failure, not latency: E2E and TPOT are NaN."""
        row = request_frame([failed_record(end_ms=50)]).iloc[0]
        assert math.isnan(row["e2e_ms"]) and math.isnan(row["tpot_ms"]) and math.isnan(row["ttft_ms"])

    def test_nanosecond_timestamps_keep_full_precision(self):
        """Large perf_counter_ns values survive as exact integers (no float round trip)."""
        t = 2**60 + 1
        r = ok_record()
        r.t_end_ns = t
        assert int(request_frame([r])["t_end_ns"].iloc[0]) == t

    def test_empty_frame(self):
        """No records: an empty frame with the same columns."""
        frame = request_frame([])
        assert len(frame) == 0 and "ttft_ms" in frame.columns


class TestFromSchedule:
    """TTFT and E2E measured from the intended send time (t_sched), wrk2's correction of
    coordinated omission: the time a request waited to be sent counts."""

    def test_a_request_sent_30_ms_late(self):
        """Scheduled at 1000 s, sent 30 ms late: from schedule = from send + 30 ms, exactly."""
        base = 1_000_000 * MS  # a perf_counter_ns-sized clock: the subtraction stays exact
        r = RequestRecord(
            id=0,
            warmup=False,
            t_sched_ns=base,
            t_send_ns=base + 30 * MS,
            requested_output_tokens=3,
            requested_prompt_tokens=10,
            ok=True,
            t_first_byte_ns=base + 110 * MS,
            t_first_token_ns=base + 130 * MS,
            t_first_content_ns=base + 150 * MS,  # after reasoning: TTFT uses the first token
            t_end_ns=base + 195 * MS,
            chunk_times_ns=[base + 130 * MS, base + 150 * MS, base + 190 * MS],
            chunk_tokens=[1, 1, 1],
            output_tokens=3,
        )
        row = request_frame([r]).iloc[0]
        assert row["client_lag_ms"] == 30.0
        assert row["ttft_ms"] == 100.0 and row["ttft_from_sched_ms"] == 130.0
        assert row["e2e_ms"] == 165.0 and row["e2e_from_sched_ms"] == 195.0
        assert row["ttft_from_sched_ms"] == row["ttft_ms"] + 30
        assert row["e2e_from_sched_ms"] == row["e2e_ms"] + 30

    def test_summary_of_late_requests(self):
        """Lags 0, 30 and 60 ms on TTFTs of 100, 110, 120 ms: from schedule 100, 140, 180."""
        records = [
            ok_record(id=i, send_ms=1000 * i + 30 * i, sched_ms=1000 * i, ttft_ms=100 + 10 * i)
            for i in range(3)
        ]
        m = summarize(records)["metrics"]
        assert m["ttft_ms"]["min"] == 100.0 and m["ttft_ms"]["max"] == 120.0
        assert m["ttft_from_sched_ms"] == distribution([100.0, 140.0, 180.0])
        assert m["ttft_from_sched_ms"]["p50"] == 140.0 and m["ttft_from_sched_ms"]["mean"] == 140.0
        assert m["e2e_ms"] == distribution([135.0, 145.0, 155.0])
        assert m["e2e_from_sched_ms"] == distribution([135.0, 175.0, 215.0])

    def test_closed_loop_equals_send_based(self):
        """t_sched == t_send (a slot sends at once): the same distributions, to the bit."""
        records = [
            ok_record(id=i, send_ms=7 * i, ttft_ms=100 + 3 * i, gaps_ms=(i + 1,), tokens=(1, 1))
            for i in range(5)
        ]
        m = summarize(records)["metrics"]
        assert m["ttft_from_sched_ms"] == m["ttft_ms"] and m["ttft_ms"]["count"] == 5
        assert m["e2e_from_sched_ms"] == m["e2e_ms"] and m["e2e_ms"]["count"] == 5

    def test_ok_measured_requests_only(self):
        """Like TTFT and E2E: a failure has no E2E (a streamed one keeps its TTFT in the frame),
        and failed and warm-up requests are left out of the distributions."""
        streamed = ok_record(id=1, send_ms=10, sched_ms=0, ok=False, error_class="read")
        records = [
            ok_record(id=0, send_ms=5, sched_ms=0),
            streamed,
            failed_record(id=2),
            ok_record(id=3, send_ms=50, sched_ms=0, warmup=True),
        ]
        frame = request_frame(records)
        assert frame["ttft_from_sched_ms"].tolist()[:2] == [105.0, 110.0]
        assert math.isnan(frame["e2e_from_sched_ms"].iloc[1])
        assert math.isnan(frame["ttft_from_sched_ms"].iloc[2])  # failed before any token
        assert math.isnan(frame["e2e_from_sched_ms"].iloc[2])
        m = summarize(records)["metrics"]
        assert m["ttft_from_sched_ms"] == distribution([105.0])
        assert m["e2e_from_sched_ms"] == distribution([140.0])

    def test_sla_rule_on_latency_from_schedule(self):
        """A rule on the from-schedule TTFT catches the wait a send-based rule does not see."""
        records = [ok_record(id=i, send_ms=100 * i + 50, sched_ms=100 * i) for i in range(4)]
        rules = [Rule("ttft_ms", "p99", "<", 120), Rule("ttft_from_sched_ms", "p99", "<", 120)]
        block = summarize(records, sla=Sla(rules=rules))["sla"]
        assert [d["passed"] for d in block["details"]] == [True, True, False]  # error rate first
        assert block["details"][2]["value"] == 150.0
        assert block["verdict"] == "fail"


class TestItl:
    def test_per_chunk_and_per_token(self):
        """Gaps of 10 ms with later chunks carrying [1, 3, 1]: per chunk 3 samples of 10,
        per token 5 samples (10, 10/3 three times, 10)."""
        itl, per_token = itl_values([ok_record(gaps_ms=(10, 10, 10), tokens=(1, 1, 3, 1))])
        assert itl.tolist() == [10.0, 10.0, 10.0]
        assert per_token.tolist() == pytest.approx([10.0, 10 / 3, 10 / 3, 10 / 3, 10.0])

    def test_pooled_over_ok_measured_requests_without_cross_request_gaps(self):
        """Gaps never span two requests; warm-up and failed requests contribute nothing."""
        records = [
            ok_record(id=0, gaps_ms=(5,), tokens=(1, 1)),
            ok_record(id=1, send_ms=1000, gaps_ms=(7, 8), tokens=(1, 1, 2)),
            ok_record(id=2, gaps_ms=(99,), tokens=(1, 1), warmup=True),
            ok_record(id=3, gaps_ms=(98,), tokens=(1, 1), ok=False, error_class="read"),
        ]
        itl, per_token = itl_values(records)
        assert itl.tolist() == [5.0, 7.0, 8.0]
        assert per_token.tolist() == [5.0, 7.0, 4.0, 4.0]

    def test_no_gaps(self):
        """No eligible gaps: two empty arrays."""
        itl, per_token = itl_values([ok_record(gaps_ms=(), tokens=(1,))])
        assert itl.size == 0 and per_token.size == 0


class TestSummarize:
    def test_counts_with_warmup_failed_and_cancelled(self):
        """Counts cover measured requests; cancelled is neither ok nor failed; warm-up apart."""
        records = [
            ok_record(id=0),
            ok_record(id=1),
            failed_record(id=2, error_class="http_500"),
            failed_record(id=3, error_class="timeout"),
            failed_record(id=4, error_class="http_500"),
            failed_record(id=5, error_class="cancelled"),
            ok_record(id=6, warmup=True),
            failed_record(id=7, warmup=True),
        ]
        c = summarize(records)["counts"]
        assert c.pop("retries") == {"requests": 0, "by_reason": {}}
        # These records carry no message and no stream end (a stub's): nothing to quote or count.
        assert c.pop("error_samples") == {k: {"message": None, "hint": None} for k in ("http_500", "timeout")}
        assert c.pop("stream_ends") == {"terminator": 0, "no_terminator": 0, "end_of_body": 0}
        assert c == {
            "sent": 6,
            "ok": 2,
            "failed": 3,
            "cancelled": 1,
            "warmup": 2,
            "errors_by_class": {"http_500": 2, "cancelled": 1, "timeout": 1},
            "error_rate": 3 / 5,
            "anomalies": {"zero_output_tokens": 0},
            "retry_after": {"requests": 0, "max_s": None},
        }

    def test_zero_token_streams_and_back_off_requests_are_counted(self):
        """An ok stream without a token is an anomaly, not a silent success; Retry-After is kept."""
        zero = ok_record(id=1)
        zero.output_tokens = 0
        limited = [failed_record(id=i, error_class="http_429") for i in (2, 3, 4)]
        limited[0].retry_after_s, limited[1].retry_after_s = 7.0, 2.5
        c = summarize([ok_record(id=0), zero, *limited])["counts"]
        assert c["anomalies"] == {"zero_output_tokens": 1}
        assert c["retry_after"] == {"requests": 2, "max_s": 7.0}
        assert c["ok"] == 2 and c["errors_by_class"] == {"http_429": 3}

    def test_latencies_cover_ok_measured_requests_only(self):
        """Warm-up and failed requests are excluded from the latency distributions."""
        records = [
            ok_record(id=0, ttft_ms=100),
            ok_record(id=1, ttft_ms=200, warmup=True),
            ok_record(id=2, ttft_ms=300, ok=False, error_class="read"),
        ]
        m = summarize(records)["metrics"]
        assert m["ttft_ms"]["count"] == 1 and m["ttft_ms"]["max"] == 100.0
        assert m["tpot_ms"]["mean"] == 6.0
        assert m["itl_ms"]["count"] == 3 and m["itl_per_token_ms"]["count"] == 5
        assert m["client_lag_ms"]["count"] == 2  # every measured request that was sent

    def test_window_spans_measured_sends_to_ends(self):
        """Window: first measured send to last measured end (a failure's end counts,
        a request without t_end ends at its send); warm-up is outside."""
        records = [
            ok_record(id=0, send_ms=-500, warmup=True),
            span_record(1, 10, 200),
            failed_record(id=2, send_ms=50, end_ms=400),
            failed_record(id=3, send_ms=450, end_ms=None),
        ]
        w = summarize(records)["window"]
        assert w == {"start_ns": 10 * MS, "end_ns": 450 * MS, "seconds": 0.44}

    def test_throughput_over_window(self):
        """Rates are ok requests and their tokens per window second."""
        records = [
            span_record(0, 0, 500, tokens=4),
            span_record(1, 500, 1000, tokens=6),
            failed_record(id=2, send_ms=100, end_ms=200),
        ]
        m = summarize(records)["metrics"]
        assert m["request_throughput_rps"] == 2.0
        assert m["output_tokens_per_s"] == 10.0
        assert m["input_tokens_per_s"] == 20.0
        assert m["total_tokens_per_s"] == 30.0

    def test_mean_concurrency_of_two_overlapping_requests(self):
        """[0, 100] and [50, 200] ms in a 200 ms window: (100 + 150) / 200 = 1.25 in flight."""
        m = summarize([span_record(0, 0, 100), span_record(1, 50, 200)])["metrics"]
        assert m["mean_concurrency"] == 1.25

    def test_littles_law_closed_loop(self):
        """Two slots of 5 back-to-back 100 ms requests: on the dispatch window [0, 400] ms,
        8 completions / 0.4 s x 0.1 s = 2 expected, and 2 measured in flight."""
        records = [span_record(slot * 5 + k, k * 100, k * 100 + 100) for slot in range(2) for k in range(5)]
        ll = summarize(records)["metrics"]["littles_law"]
        assert ll["window_seconds"] == 0.4
        assert ll["expected_concurrency"] == pytest.approx(2.0, rel=1e-12)
        assert ll["measured_concurrency"] == 2.0
        assert ll["ratio"] == pytest.approx(1.0, rel=1e-12)

    def test_littles_law_counts_failed_requests_on_both_sides(self):
        """A failure holds the server like a success: sends at 0, 0, 100 ms, each 100 ms long,
        give 2 in flight on [0, 100] ms and 2 completions / 0.1 s x 0.1 s = 2 expected."""
        records = [
            span_record(0, 0, 100),
            failed_record(id=1, send_ms=0, end_ms=100),
            span_record(2, 100, 200),
        ]
        ll = summarize(records)["metrics"]["littles_law"]
        assert ll == {
            "window_seconds": 0.1,
            "expected_concurrency": pytest.approx(2.0),
            "measured_concurrency": 2.0,
            "ratio": pytest.approx(1.0),
        }

    def test_littles_law_flags_an_unsteady_run(self):
        """Requests that outlast the dispatch window (a run too short for its load) leave the
        two sides apart: sends at 0, 100, 200 ms lasting 300 ms, none done by 200 ms."""
        records = [span_record(i, i * 100, i * 100 + 300) for i in range(3)]
        ll = summarize(records)["metrics"]["littles_law"]
        assert ll["measured_concurrency"] == 1.5
        assert ll["expected_concurrency"] == 0.0
        assert ll["ratio"] is None

    def test_goodput_without_slo_equals_throughput(self):
        """No per-request SLO: goodput is the ok throughput and the sla block says so."""
        records = [span_record(0, 0, 500), failed_record(id=1, send_ms=0, end_ms=1000)]
        s = summarize(records, sla=Sla())
        assert s["metrics"]["goodput"] == {
            "requests_per_s": 1.0,
            "output_tokens_per_s": 2.0,
            "attained_fraction": 0.5,
        }
        assert s["sla"]["slos"] == {} and "goodput equals" in s["sla"]["slo_note"]

    @pytest.mark.parametrize(
        "slo, good_ids",
        [
            ({"ttft_ms": 150}, {0, 2}),  # TTFTs 100, 200, 100
            ({"tpot_ms": 8}, {0, 1, 2}),  # TPOTs 6, 6, none (1 token passes)
            ({"tpot_ms": 5}, {2}),
            ({"e2e_ms": 200}, {0, 2}),  # E2Es 135, 235, 105
            ({"ttft_ms": 150, "e2e_ms": 110}, {2}),
        ],
    )
    def test_goodput_with_each_slo(self, slo, good_ids):
        """Good = ok and within every set SLO; fewer than 2 tokens passes the TPOT SLO."""
        records = [
            ok_record(id=0, send_ms=0, ttft_ms=100),
            ok_record(id=1, send_ms=0, ttft_ms=200),
            ok_record(id=2, send_ms=0, ttft_ms=100, gaps_ms=(), tokens=(1,)),
            failed_record(id=3, send_ms=0, end_ms=1000),
        ]
        tokens = {0: 6, 1: 6, 2: 1}
        s = summarize(records, sla=Sla(**slo))
        g = s["metrics"]["goodput"]
        assert g["requests_per_s"] == float(len(good_ids))  # window is exactly 1 s
        assert g["output_tokens_per_s"] == float(sum(tokens[i] for i in good_ids))
        assert g["attained_fraction"] == len(good_ids) / 4
        assert s["sla"]["slos"] == {k: float(v) for k, v in slo.items()}

    def test_reasoning_block_only_when_reasoning_streamed(self):
        """Time to first reasoning token appears only when some request streamed reasoning."""
        assert "reasoning" not in summarize([ok_record()])["metrics"]
        r = ok_record(reasoning_times_ns=[30 * MS, 40 * MS], reasoning_tokens=[1, 1])
        block = summarize([r, ok_record(id=1)])["metrics"]["reasoning"]
        assert block["requests"] == 1 and block["ttfr_ms"]["p50"] == 30.0

    def test_token_sources_are_counted(self):
        """How output and prompt token counts were obtained is counted over ok requests."""
        records = [
            ok_record(id=0, token_source="usage", prompt_tokens_source="usage"),
            ok_record(id=1),
            ok_record(id=2),
        ]
        m = summarize(records)["metrics"]
        assert m["token_count_source"] == {"chunks": 2, "usage": 1}
        assert m["prompt_tokens_source"] == {"target": 2, "usage": 1}

    def test_empty_run(self):
        """No records: zero counts, empty distributions, no rates, no crash, valid JSON."""
        s = summarize([], sla=Sla(ttft_ms=100, rules=[Rule("ttft_ms", "p99", "<", 700)]))
        assert s["counts"]["sent"] == 0 and s["counts"]["error_rate"] is None
        assert s["window"] == {"start_ns": None, "end_ns": None, "seconds": 0.0}
        assert s["metrics"]["ttft_ms"]["count"] == 0
        assert s["metrics"]["request_throughput_rps"] is None
        assert s["metrics"]["mean_concurrency"] is None
        assert s["sla"]["verdict"] == "fail"
        orjson.dumps(s)

    def test_summary_is_plain_json_without_nan(self):
        """orjson serialises the summary and a round trip gives back the same values."""
        records = [ok_record(id=0), failed_record(id=1), ok_record(id=2, gaps_ms=(), tokens=(1,))]
        s = summarize(records, sla=Sla(tpot_ms=50, rules=[Rule("error_rate", None, "<", 0.5)]))
        text = orjson.dumps(s)
        assert b"NaN" not in text and b"nan" not in text
        assert orjson.loads(text) == s


class TestSla:
    RECORDS = tuple(ok_record(id=i, send_ms=i * 10, ttft_ms=100 + i) for i in range(10))

    def test_no_rules_is_verdict_none(self):
        """No rules: verdict "none"."""
        assert summarize(self.RECORDS)["sla"]["verdict"] == "none"

    def test_pass_and_fail(self):
        """A met and an unmet rule: details say which, verdict fails."""
        rules = [
            Rule("ttft_ms", "p50", "<", 200),
            Rule("ttft_ms", "max", "<=", 105),
            Rule("error_rate", None, "<=", 0.0),
        ]
        block = summarize(self.RECORDS, sla=Sla(rules=rules))["sla"]
        assert block["rules"] == [
            "error_rate <= 0.01",
            "p50 ttft_ms < 200",
            "max ttft_ms <= 105",
            "error_rate <= 0",
        ]
        assert [d["passed"] for d in block["details"]] == [True, True, False, True]
        assert block["details"][2]["value"] == 109.0
        assert block["details"][2]["threshold"] == 105.0 and block["details"][2]["op"] == "<="
        assert block["verdict"] == "fail"

    def test_failed_requests_fail_every_verdict_with_the_reason_first(self):
        """Latency rules judge the ok requests only: with 6 of 10 failed they all pass, and the
        error-rate check (sla.max_error_rate, 1 % by default) fails the verdict, saying first
        how many failed and why."""
        records = [
            *(ok_record(id=i, send_ms=i * 10) for i in range(4)),
            *(failed_record(id=4 + i, error_class="read") for i in range(4)),
            *(failed_record(id=8 + i, error_class="http_400") for i in range(2)),
        ]
        block = summarize(records, sla=Sla(rules=[Rule("ttft_ms", "p99", "<", 700)]))["sla"]
        assert block["verdict"] == "fail"
        first, latency = block["details"]
        assert first["max_error_rate"] is True and first["passed"] is False and first["value"] == 0.6
        assert first["reason"] == (
            "6 of 10 requests failed (read 4, http_400 2): error rate 60.0% > max_error_rate 1.0%"
        )
        assert latency["passed"] is True
        lenient = Sla(rules=[Rule("ttft_ms", "p99", "<", 700)], max_error_rate=0.7)
        assert summarize(records, sla=lenient)["sla"]["verdict"] == "pass"

    def test_all_pass(self):
        """Every rule met: verdict pass, including run-level throughput and goodput rules."""
        rules = [
            Rule("tpot_ms", "p99", "<", 50),
            Rule("request_throughput_rps", None, ">", 1),
            Rule("goodput_rps", None, ">=", 1),
            Rule("output_tokens_per_s", None, ">", 0),
        ]
        assert summarize(self.RECORDS, sla=Sla(rules=rules))["sla"]["verdict"] == "pass"

    def test_rule_without_data_fails(self):
        """A rule on a metric with no samples fails with value None and a reason."""
        rules = [Rule("ttft_ms", "p99", "<", 700)]
        block = summarize([failed_record()], sla=Sla(rules=rules))["sla"]
        errors, d = block["details"]
        assert errors["passed"] is False and errors["value"] == 1.0
        assert d["passed"] is False and d["value"] is None and "no data" in d["reason"]
        assert block["verdict"] == "fail"


class TestClientLimits:
    def test_on_time_client_gives_none(self):
        """Sends within the threshold: no warning."""
        assert client_limits([ok_record(id=i, sched_ms=-1) for i in range(10)]) is None

    def test_late_client_is_flagged(self):
        """p99 lag over the threshold: a client_limited warning with the late fraction."""
        records = [ok_record(id=i, sched_ms=-(50 if i < 2 else 0)) for i in range(10)]
        records.append(ok_record(id=99, sched_ms=-1000, warmup=True))
        w = client_limits(records, lag_threshold_ms=10.0)
        assert w["warning"] == "client_limited"
        assert w["client_lag_max_ms"] == 50.0
        assert w["late_fraction"] == 0.2
        assert w["client_lag_p99_ms"] == 50.0
        assert "client" in w["message"]

    def test_no_records(self):
        """No measured requests: nothing to warn about."""
        assert client_limits([]) is None
