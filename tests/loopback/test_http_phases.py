"""HTTP phases stamped by the transports, over real loopback sockets, plain HTTP and TLS
(trustme's throwaway CA): a fresh connection's stamps in the order the phases happen, a reused
one without connection stamps, and as many fresh connections in the records as the server
accepted. Each transport is driven directly, with the consumer every protocol's stream is (a
``rec`` to stamp), so the server's count is exactly the requests' connections."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping

import orjson
import pytest
import trustme

from loadgen import records as R
from loadgen.backends.transports import TransportOptions, make_transport
from loadgen.cli.block_lines import http_phases_lines
from loadgen.clock import now_ns
from loadgen.report import write_report
from loadgen.testing.hostile import HostileServer

import helpers

TRANSPORTS = ("httptools", "httpx")
FRESH = 3  # requests sent at once: each on a connection of its own
REUSED = 4  # then one after another, on the connections the first ones left idle
BODY = orjson.dumps(
    {
        "model": "hostile-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
    }
)
CONNECTION_STAMPS = ("t_conn_start_ns", "t_dns_ns", "t_connect_ns", "t_tls_ns")


class Stream:
    """The consumer's side of the seam, with the record the transport stamps (``rec``)."""

    def __init__(self, rec: R.RequestRecord) -> None:
        self.rec, self.body = rec, b""

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        self.rec.http_status, self.rec.t_first_byte_ns = status, t_ns

    def feed(self, t_ns: int, data: bytes) -> bool:
        self.body += data
        return True

    def resent(self, t_ns: int, reason: str) -> None:
        self.rec.attempts += 1


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture(params=("http", "https"))
def server(request, ca):
    tls = None
    if request.param == "https":
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1", "localhost").configure_cert(tls)
    with HostileServer("ok", tls=tls) as srv:
        yield srv


async def _one(transport, i: int) -> R.RequestRecord:
    rec = R.RequestRecord(i, False, 0, now_ns(), 4, 8)
    stream = Stream(rec)
    await transport.post_stream("/v1/chat/completions", BODY, stream)
    rec.t_end_ns = now_ns()
    assert rec.http_status == 200 and b"[DONE]" in stream.body
    return rec


def send(kind: str, url: str, ca_file: str) -> list[R.RequestRecord]:
    """FRESH requests at once, then REUSED one after another, through one transport."""

    async def go() -> list[R.RequestRecord]:
        opts = TransportOptions(url, {}, None, 3.0, 3.0, ca_bundle=ca_file)
        transport = make_transport(kind, opts)
        try:
            recs = list(await asyncio.gather(*(_one(transport, i) for i in range(FRESH))))
            for i in range(REUSED):
                recs.append(await _one(transport, FRESH + i))
            return recs
        finally:
            await transport.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("kind", TRANSPORTS)
class TestPhases:
    def test_fresh_connections_are_stamped_in_order_and_counted_as_the_server_saw(
        self, kind, server, ca_file
    ):
        """A fresh connection: start <= resolved <= connected <= TLS <= written <= first byte <=
        last byte <= end; exactly the server's accepted connections are fresh in the records."""
        recs = send(kind, server.url, ca_file)
        fresh = [r for r in recs if r.conn_reused is False]
        assert len(fresh) == server.connections_accepted == FRESH
        https = server.url.startswith("https")
        for r in fresh:
            assert r.t_tls_ns is not None if https else r.t_tls_ns is None
            order = [
                r.t_send_ns,
                r.t_conn_start_ns,
                r.t_dns_ns,
                r.t_connect_ns,
                *([r.t_tls_ns] if https else []),
                r.t_written_ns,
                r.t_first_byte_ns,
                r.t_last_byte_ns,
                r.t_end_ns,
            ]
            assert None not in order, r
            assert order == sorted(order), r

    def test_a_reused_connection_has_no_connection_stamps(self, kind, server, ca_file):
        """Requests after the first wave go out on idle connections: conn_reused true, no DNS,
        connect or TLS stamp, the write and the response still stamped in order."""
        recs = send(kind, server.url, ca_file)[FRESH:]
        assert [r.conn_reused for r in recs] == [True] * REUSED
        for r in recs:
            assert [getattr(r, k) for k in CONNECTION_STAMPS] == [None] * 4
            order = [r.t_send_ns, r.t_written_ns, r.t_first_byte_ns, r.t_last_byte_ns, r.t_end_ns]
            assert None not in order and order == sorted(order), r


def test_a_host_name_is_resolved_and_stamped_by_httptools(ca_file):
    """httptools resolves ``localhost`` itself, so its DNS phase has a stamp between the start
    and the TCP handshake; httpx resolves inside httpcore's connect and stamps no DNS."""
    with HostileServer("ok") as srv:
        url = srv.url.replace("127.0.0.1", "localhost")
        tools, httpx = send("httptools", url, ca_file)[0], send("httpx", url, ca_file)[0]
    assert tools.t_conn_start_ns <= tools.t_dns_ns <= tools.t_connect_ns
    assert httpx.t_dns_ns is None and httpx.t_conn_start_ns <= httpx.t_connect_ns


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_a_run_records_its_phases_and_the_summary_and_report_count_them(kind, server, ca_file, tmp_path):
    """A whole run: every record carries its phases, the ``http_phases`` block counts exactly
    the records' fresh and reused connections and each phase's sample, and the report and the
    console show them."""
    prof = helpers.profile(
        tmp_path,
        server.url,
        **{
            "target.transport": kind,
            "target.ca_bundle": ca_file,
            "workload.num_requests": 10,
            "load.concurrency": 2,
            "workload.output_tokens": 4,
            "server_metrics.enabled": False,
        },
    )
    res = helpers.run(prof)
    recs = [r for r in R.read_records(res.run_dir / "requests.jsonl") if not r.warmup]
    block = res.summary["http_phases"]
    fresh = [r for r in recs if r.conn_reused is False]
    assert len(recs) == 10 and all(r.conn_reused is not None for r in recs)
    assert (block["requests"], block["fresh_connections"]) == (10, len(fresh))
    assert block["reused_connections"] == 10 - len(fresh) and block["reuse_rate"] == (10 - len(fresh)) / 10
    https = server.url.startswith("https")
    assert block["tls_handshakes"] == (len(fresh) if https else 0)
    counts = {name: d["count"] for name, d in block["phases_ms"].items()}
    assert counts == {
        "dns": len(fresh),
        "connect": len(fresh),
        "tls": len(fresh) if https else 0,
        "write": 10,
        "wait": 10,
        "download": 10,
    }
    waits = sorted((r.t_first_byte_ns - r.t_written_ns) / 1e6 for r in recs)
    assert block["phases_ms"]["wait"]["max"] == pytest.approx(waits[-1])
    write_report(res.run_dir)
    report = (res.run_dir / "report.md").read_text()
    assert "## HTTP phases" in report and "wait: waiting for the first byte" in report
    line = http_phases_lines(res.summary)[0]
    assert line.startswith(f"http phases {len(fresh)} fresh connections, {10 - len(fresh)} reused")
