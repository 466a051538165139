"""Speculative decoding read from the server's counters and from the stream: exact figures from
a vLLM scrape's text and from events carrying several tokens, in the summary, per stage, in the
report and on the console."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.analysis.table import RecordTable
from loadgen.records import RequestRecord
from loadgen.report.speculative import speculative_section
from loadgen.runner import api
from loadgen.server import metrics as sm
from loadgen.server.speculative import server_figures, speculative_block, stream_figures

VLLM = """
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} %(drafts)s
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} %(draft_tokens)s
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} %(accepted)s
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} %(p0)s
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} %(p1)s
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} %(p2)s
"""


def row(t_ns: int, **counts: float) -> dict:
    r = sm.normalize(sm.parse(VLLM % counts), "vllm")
    return {"t_ns": t_ns, **r}


class TestServer:
    def test_vllm_counters_give_rate_length_and_positions(self):
        """100 drafts of 3 tokens, 180 accepted (90, 60, 30 by position) between the scrapes at
        the window's edges: rate 60 %, length 2.8, positions 90/60/30 %; the scrape inside the
        window does not count."""
        rows = [
            row(0, drafts=10, draft_tokens=30, accepted=20, p0=10, p1=7, p2=3),
            row(5, drafts=50, draft_tokens=150, accepted=90, p0=45, p1=30, p2=15),
            row(10, drafts=110, draft_tokens=330, accepted=200, p0=100, p1=67, p2=33),
        ]
        got = server_figures(rows, (1, 9))
        assert got == {
            "drafts": 100.0,
            "draft_tokens": 300.0,
            "accepted_tokens": 180.0,
            "acceptance_rate": pytest.approx(0.6),
            "mean_acceptance_length": pytest.approx(2.8),
            "source": "counters",
            "per_position": [pytest.approx(0.9), pytest.approx(0.6), pytest.approx(0.3)],
        }

    def test_a_counter_that_went_back_gives_no_figures(self):
        rows = [
            row(0, drafts=50, draft_tokens=150, accepted=90, p0=1, p1=1, p2=1),
            row(9, drafts=5, draft_tokens=15, accepted=9, p0=1, p1=1, p2=1),
        ]
        assert server_figures(rows, None) is None

    def test_sglang_gauge_is_averaged_over_the_window(self):
        rows = [
            {"t_ns": 0, "spec_accept_length": 9.0},
            {"t_ns": 2, "spec_accept_length": 2.0},
            {"t_ns": 4, "spec_accept_length": 3.0},
            {"t_ns": 8, "spec_accept_length": 9.0},
        ]
        assert server_figures(rows, (1, 5)) == {"mean_acceptance_length": 2.5, "source": "gauge"}


def record(
    i: int, tokens: list[int], source: str = "continuous_usage", warmup: bool = False
) -> RequestRecord:
    times = [10_000_000 * (k + 1) for k in range(len(tokens))]
    return RequestRecord(
        id=i, warmup=warmup, t_sched_ns=0, t_send_ns=0, requested_output_tokens=sum(tokens),
        requested_prompt_tokens=8, ok=True, t_first_token_ns=times[0], t_end_ns=times[-1] + 1,
        chunk_times_ns=times, chunk_tokens=tokens, output_tokens=sum(tokens), token_source=source,
    )  # fmt: skip


class TestStream:
    def test_tokens_per_event_counts_only_counted_events(self):
        """Events [1, 3, 2] and [2, 2]: 10 tokens in 5 events, 4 of them multi-token; a record with
        one assumed per event and a warm-up record are left out."""
        table = RecordTable.from_records(
            [
                record(0, [1, 3, 2]),
                record(1, [2, 2]),
                record(2, [1, 1, 1], source="chunks"),
                record(3, [5, 5], warmup=True),
            ]
        )
        assert stream_figures(table) == {
            "events": 5,
            "tokens": 10,
            "tokens_per_event": 2.0,
            "multi_token_events": 0.8,
        }

    def test_no_speculation_no_block(self):
        table = RecordTable.from_records([record(0, [1, 1, 1])])
        assert speculative_block(None, None, table) is None


def test_a_run_whose_events_carry_several_tokens_shows_it(server, make_profile):
    """Against the scripted server streaming 1, 3, 2 tokens an event with per-chunk usage: the
    summary's stream figures are exact (2 tokens an event), each stage has its own, and the report
    has the section with the run's TPOT beside them."""
    profile = make_profile(
        server.url,
        workload__num_requests=None,
        workload__output_tokens=12,
        target__continuous_usage_stats=True,
        target__extra_body={"loadgen_test": {"tokens_per_chunk": [1, 3, 2]}},
        load__concurrency=None,
        load__stages=[{"concurrency": 1, "num_requests": 3}, {"concurrency": 2, "num_requests": 4}],
    )
    res = asyncio.run(api.run_async(profile))
    spec = res.summary["speculative"]
    assert spec["server"] is None
    assert spec["stream"]["tokens_per_event"] == 2.0 and spec["stream"][
        "multi_token_events"
    ] == pytest.approx(4 / 6)
    assert [s["speculative"]["stream"]["events"] for s in res.summary["stages"]] == [18, 24]
    section = speculative_section(res.summary)
    assert section is not None and section.title == "Speculative decoding"
    text = (res.run_dir / "summary.json").read_text()
    assert '"tokens_per_event": 2.0' in text
