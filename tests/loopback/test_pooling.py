"""Embeddings and rerank end to end over loopback: against the scripted server (which logs when
it received each request and handed its answer to the socket, on loadgen's clock) and the
hostile server (one fault per answer shape). A pooling answer is not streamed: records carry
``items`` and the server's prompt tokens, the summary request latency and items/s, and no
table shows TTFT, ITL or TPOT. Records are matched to the logs by response id.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import loadgen
from loadgen import records as R
from loadgen.cli.console import summary_table
from loadgen.report import compare as compare_report
from loadgen.report import write_report
from loadgen.report.sections import latency_table, throughput_section
from loadgen.testing.hostile import HostileServer
from loadgen.testing.openai_stream import toy_token_count
from loadgen.workload import Workload

from helpers import assert_percentiles, cli, run

MS = 1e6
PROTOCOLS = ("embeddings", "rerank")
# Every key of a pooling run's metrics block: request latency and rates, no token stream.
POOLING_METRICS = [
    "e2e_ms",
    "client_lag_ms",
    "e2e_from_sched_ms",
    "request_throughput_rps",
    "input_tokens_per_s",
    "items_per_s",
    "mean_concurrency",
    "littles_law",
    "goodput",
    "token_count_source",
    "prompt_tokens_source",
]


def script(**behaviour):
    """target.extra_body that scripts the test server (a top-level ``loadgen_test`` field)."""
    return {"target__extra_body": {"loadgen_test": behaviour}}


def pooled(make_profile, url, proto, n=4, batch=3, **kw):
    return make_profile(
        url,
        target__endpoint=proto,
        workload__num_requests=n,
        workload__batch_size=batch,
        workload__input_tokens=12,
        **kw,
    )


@pytest.mark.parametrize("proto", PROTOCOLS)
class TestAgainstTheScriptedServer:
    def test_items_tokens_and_times_match_the_servers_log(self, server, make_profile, proto):
        """3 items a request: each record has items 3 = the server's count, the server's prompt
        tokens (usage, toy_token_count's: a rerank pair counts the query with each document),
        was sent before the server received it and ended after the server wrote the answer."""
        profile = pooled(make_profile, server.url, proto, **script(ttft_ms=20))
        res = run(profile)
        assert res.summary["counts"]["ok"] == 4
        log = server.log()
        work = Workload(profile.workload, proto)
        for r in res.records:
            gt = log[r.response_id]
            assert (gt["endpoint"], gt["items"], r.items) == (proto, 3, 3)
            assert (r.prompt_tokens, r.prompt_tokens_source) == (gt["prompt_tokens"], "usage")
            spec = work.request(r.id)  # the same items, counted by the server's own rule
            query = toy_token_count(spec.prompt, False) if proto == "rerank" else 0
            assert r.prompt_tokens == sum(query + toy_token_count(t, False) for t in spec.inputs)
            assert r.t_send_ns <= gt["recv_ns"] and r.t_end_ns >= gt["end_ns"]
            assert r.chunk_times_ns == [] and r.t_first_token_ns is None and r.output_tokens == 0

    def test_the_summary_has_items_per_s_and_no_token_stream(self, server, make_profile, proto):
        """items/s is sum(items) over the window; the metrics block is exactly a pooling run's
        (no TTFT, ITL, TPOT, output tokens/s); no zero-output anomaly for answers without output."""
        res = run(pooled(make_profile, server.url, proto, n=6, batch={"kind": "uniform", "min": 1, "max": 5}))
        m, counts = res.summary["metrics"], res.summary["counts"]
        assert list(m) == POOLING_METRICS
        assert list(m["goodput"]) == ["requests_per_s", "attained_fraction"]
        items = sum(r.items for r in res.records)
        assert m["items_per_s"] == items / res.summary["window"]["seconds"]
        assert items > 6  # the draw was not all ones
        assert counts["anomalies"]["zero_output_tokens"] == 0 and counts["ok"] == 6

    @pytest.mark.parametrize(
        "fail,cls",
        [
            ("status:500", "http_500"),
            ("garbage", R.MALFORMED),
            ("truncated", R.MALFORMED),
            ("wrong_count", R.MALFORMED),
            ("error_body", R.SERVER_ERROR_EVENT),
            ("reset", R.READ),
        ],
    )
    def test_scripted_faults_are_classed(self, server, make_profile, proto, fail, cls):
        """Each scripted fault of an answer gives a failed record of its class, never the run."""
        res = run(pooled(make_profile, server.url, proto, n=2, **script(fail=fail)))
        assert {(r.ok, r.error_class) for r in res.records} == {(False, cls)}
        assert res.summary["counts"]["failed"] == 2


def test_a_wrong_count_says_how_many(server, make_profile):
    """The malformed record's message says what was wrong: 2 embeddings for 3 inputs."""
    res = run(pooled(make_profile, server.url, "embeddings", n=1, **script(fail="wrong_count")))
    (r,) = res.records
    assert r.error_message == "an answer of an unexpected shape (ValueError: 2 embeddings for 3 sent)"


def test_a_stalled_answer_times_out(server, make_profile):
    """The server sends its head, then nothing: timeout after target.timeout_s, the run goes on."""
    res = run(pooled(make_profile, server.url, "rerank", n=2, target__timeout_s=0.5, **script(fail="stall")))
    assert {(r.ok, r.error_class) for r in res.records} == {(False, R.TIMEOUT)}


HOSTILE = [
    ("pooling_truncated", R.MALFORMED),
    ("pooling_wrong_count", R.MALFORMED),
    ("pooling_bad_item", R.MALFORMED),
    ("http_500", "http_500"),
    ("stall", R.TIMEOUT),
    ("ok", None),
]


@pytest.mark.parametrize("proto", PROTOCOLS)
@pytest.mark.parametrize("mode,cls", HOSTILE, ids=[m for m, _ in HOSTILE])
def test_each_hostile_fault_of_an_answer_is_classed(make_profile, proto, mode, cls):
    """Every fault of a pooling answer: a classed record, never a traceback, the server unharmed."""
    with HostileServer(mode) as srv:
        res = run(pooled(make_profile, srv.url, proto, n=2, target__timeout_s=0.5))
        assert srv.errors == []
    assert {(r.ok, r.error_class) for r in res.records} == {(cls is None, cls)}
    if cls is None:
        assert [r.prompt_tokens for r in res.records] == [3 * 12 * (1 + (proto == "rerank"))] * 2


@pytest.mark.slow
def test_report_and_compare_show_no_token_stream(server, make_profile, tmp_path):
    """A pooling run's console and report tables, report.md and a compare of two such runs have
    no TTFT, ITL or TPOT row, no output tokens/s; items/s is there."""
    a = run(pooled(make_profile, server.url, "embeddings"))
    b = run(pooled(make_profile, server.url, "embeddings", **script(ttft_ms=5)))
    s = a.summary
    console = list(summary_table(s).columns[0].cells)
    assert console[:2] == ["E2E", "client lag"] and set(console) <= {"E2E", "client lag", "E2E from schedule"}
    assert [r[0] for r in latency_table(s).rows][:1] == ["E2E"]
    assert not {"TTFT", "TTFB", "ITL (per chunk)", "ITL (per token)", "TPOT"} & {
        r[0] for r in latency_table(s).rows
    }
    assert [r[0] for r in throughput_section(s).blocks[0].rows] == [
        "requests/s",
        "input tokens/s",
        "items/s",
        "mean requests in flight",
        "requests",
    ]
    write_report(a.run_dir, gpu_hour_cost=3.6)
    md = (a.run_dir / "report.md").read_text()
    assert "TTFT" not in md and "TPOT" not in md and "items/s" in md
    # what the GPU-hour bought: items and input tokens, no output tokens to price
    cost = json.loads((a.run_dir / "cost.json").read_text())
    assert cost["usd_per_million_items"] == 3.6 / 3600 / s["metrics"]["items_per_s"] * 1e6
    assert cost["usd_per_million_output_tokens"] is None and "| items (inputs, documents) |" in md
    html = (a.run_dir / "report.html").read_text()  # the interactive section's SLO boxes: E2E only
    assert 'id="lg-slo-e2e_ms"' in html and 'id="lg-slo-ttft_ms"' not in html
    assert not (a.run_dir / "plots" / "cdf_ttft.png").exists()
    assert (a.run_dir / "plots" / "cdf_e2e.png").exists()
    cmp = loadgen.compare([a.run_dir, b.run_dir])
    rows = list(cmp.table.index)
    assert not [r for r in rows if r.split(" ")[0] in ("ttft_ms", "itl_ms", "tpot_ms", "output_tokens_per_s")]
    assert "e2e_ms p99" in rows and "items_per_s" in rows
    assert not np.isnan(cmp.table.loc["items_per_s"]).any()
    text = compare_report.markdown(cmp)
    assert "TTFT" not in text and "cdf_e2e_ms.png" in text


@pytest.mark.timing_absolute
@pytest.mark.slow
@pytest.mark.serial  # a sub-millisecond or tight bound: measured with a core to itself
@pytest.mark.parametrize("proto", PROTOCOLS)
def test_concurrency_1_latency_tracks_the_server_log(server, make_profile, proto):
    """At c=1 the client's E2E exceeds the server's own (receipt to answer written) by under
    2 ms median, 5 ms max: the TTFT excess bounds of test_hosted_protocols.py."""
    res = run(
        pooled(
            make_profile,
            server.url,
            proto,
            n=10,
            load__concurrency=1,
            load__warmup_requests=2,
            **script(ttft_ms=30),
        )
    )
    log = server.log()
    excess = [
        (r.t_end_ns - r.t_send_ns) / MS - (log[r.response_id]["end_ns"] - log[r.response_id]["recv_ns"]) / MS
        for r in res.records
        if not r.warmup
    ]
    assert min(excess) >= 0
    assert_percentiles(excess, f"{proto} c=1 E2E excess over the server's", p50=2.0, max=5.0)


def test_the_cli_runs_the_shipped_profile_with_a_batch_size(server, tmp_path):
    """`loadgen run rerank --url ... --batch-size 3 --input-tokens 8`: exit 0, every record
    carries 3 documents, and the console prints items/s, not output tokens/s."""
    out = tmp_path / "reports"
    res = cli(
        "run",
        "rerank",
        "--url",
        server.url,
        "--out",
        str(out),
        "--num-requests",
        "4",
        "--warmup",
        "0",
        "--concurrency",
        "2",
        "--batch-size",
        "3",
        "--input-tokens",
        "8",
        "--no-report",
        "--no-progress",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    assert [json.loads(line)["items"] for line in lines] == [3] * 4
    assert "items " in res.stdout and "output tok/s" not in res.stdout


def test_repeats_give_items_per_s_and_no_ttft_figure(server, make_profile):
    """An embeddings run repeated twice: its figures over the repeats are the ones it has
    (E2E, requests/s, items/s, ...), none of a token stream."""
    res = run(pooled(make_profile, server.url, "embeddings", n=3, load__repeats=2, **script(ttft_ms=5)))
    figures = [f["figure"] for f in res.summary["repeats"]["figures"]]
    assert figures == [
        "p50 e2e_ms",
        "p99 e2e_ms",
        "request_throughput_rps",
        "items_per_s",
        "goodput_rps",
        "error_rate",
    ]
    assert all(len(f["values"]) == 2 for f in res.summary["repeats"]["figures"])
