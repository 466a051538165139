"""Speculative decoding read from the server's counters and from the stream: exact figures from
a vLLM scrape's text and from events carrying several tokens, in the summary, per stage, in the
report and on the console; and no block at all for a server that reports no speculation,
however many tokens its events carry (the simulator's draft model, which does report it, is
tests/sim/test_sim_speculative.py)."""

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
        id=i,
        warmup=warmup,
        t_sched_ns=0,
        t_send_ns=0,
        requested_output_tokens=sum(tokens),
        requested_prompt_tokens=8,
        ok=True,
        t_first_token_ns=times[0],
        t_end_ns=times[-1] + 1,
        chunk_times_ns=times,
        chunk_tokens=tokens,
        output_tokens=sum(tokens),
        token_source=source,
    )


class TestStream:
    def test_tokens_per_event_counts_only_counted_events(self):
        """Events [1, 3, 2] and [2, 2]: 10 tokens in 5 events, 4 of them multi-token; a record with
        one assumed per event, one whose chunks a local tokenizer re-counted (a chunk's text can
        re-tokenize into two where the server sent one) and a warm-up record are left out."""
        table = RecordTable.from_records(
            [
                record(0, [1, 3, 2]),
                record(1, [2, 2]),
                record(2, [1, 1, 1], source="chunks"),
                record(3, [5, 5], warmup=True),
                record(4, [2, 2, 2], source="tokenizer"),
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

    def test_several_tokens_an_event_without_the_servers_word_is_no_block(self):
        """Events of 2 and 3 tokens, but a server whose scrapes show no drafts (vLLM without a
        draft model exports none; SGLang's gauge reads 0): no block. With drafts, the block has
        both views."""
        table = RecordTable.from_records([record(0, [2, 3, 2]), record(1, [2, 2], source="tokenizer")])
        assert speculative_block(None, None, table) is None
        plain = [{"t_ns": 0, "running": 1.0}, {"t_ns": 9, "running": 2.0}]
        assert speculative_block(plain, (1, 8), table) is None
        assert speculative_block([{"t_ns": 0, "spec_accept_length": 0.0}], None, table) is None
        drafted = [
            row(0, drafts=0, draft_tokens=0, accepted=0, p0=0, p1=0, p2=0),
            row(9, drafts=10, draft_tokens=30, accepted=15, p0=8, p1=5, p2=2),
        ]
        block = speculative_block(drafted, (1, 8), table)
        assert block is not None and block["server"]["drafts"] == 10.0
        assert block["stream"]["tokens_per_event"] == pytest.approx(7 / 3)


def test_a_server_without_speculation_whose_events_carry_several_tokens_has_no_block(server, make_profile):
    """Against the scripted server streaming 1, 3, 2 tokens an event with per-chunk usage and no
    draft counters on /metrics: no speculative block in the summary or any stage, no report
    section, no console line; several tokens an event are not speculation."""
    from loadgen.cli.console import traffic_lines

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
    assert res.summary["counts"]["ok"] == 7
    assert all(r.chunk_tokens[:3] == [1, 3, 2] for r in res.records if r.ok)
    assert "speculative" not in res.summary
    assert all("speculative" not in s for s in res.summary["stages"])
    assert speculative_section(res.summary) is None
    assert not [ln for ln in traffic_lines(res.summary) if "speculative" in ln]
    assert '"speculative"' not in (res.run_dir / "summary.json").read_text()
