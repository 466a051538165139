"""TLS to the target, on every transport: a private CA trusted through target.ca_bundle, an
untrusted certificate refused with the fix named, verify_tls: false accepted and flagged, and
the two wrong-port mistakes (https:// to a plain port, http:// to a TLS port) said plainly.

The server is the hostile test server in its plain "ok" mode, with a TLS context from trustme
(a throwaway CA made in memory: nothing leaves the machine, nothing is downloaded).
"""

from __future__ import annotations

import ssl
import time

import pytest
import trustme

from loadgen.errors import RunError
from loadgen.report import write_report
from loadgen.testing.hostile import HostileServer

import helpers
from helpers import assert_within, run

TRANSPORTS = ("httptools", "aiohttp", "httpx")
N = 6


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_server(ca):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    with HostileServer("ok", tls=ctx) as srv:
        yield srv


@pytest.fixture(scope="module")
def ca_file(ca, tmp_path_factory):
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def profile(url: str, transport: str, out, **target):
    base = {
        "target.transport": transport,
        "target.connect_timeout_s": 3.0,
        "target.read_timeout_s": 3.0,
        "target.timeout_s": 5.0,
        "workload.num_requests": N,
        "workload.input_tokens": 8,
        "workload.output_tokens": 4,
        "output.dir": str(out),
        "server_metrics.enabled": False,
    }
    return helpers.profile(out, url, **{**base, **{f"target.{k}": v for k, v in target.items()}})


@pytest.mark.parametrize("transport", TRANSPORTS)
class TestTls:
    def test_a_private_ca_is_trusted_through_ca_bundle(self, transport, tls_server, ca_file, tmp_path):
        res = run(profile(tls_server.url, transport, tmp_path, ca_bundle=ca_file))
        assert res.summary["counts"]["ok"] == N
        assert res.summary["conditions"]["target"]["tls"] == {"verify": True, "ca_bundle": ca_file}

    def test_an_untrusted_certificate_fails_and_names_the_fix(self, transport, tls_server, tmp_path):
        with pytest.raises(
            RunError, match=r"(?s)cannot reach https://.*CERTIFICATE_VERIFY_FAILED.*ca_bundle"
        ):
            run(profile(tls_server.url, transport, tmp_path))

    def test_verify_tls_false_accepts_any_certificate_and_says_so(self, transport, tls_server, tmp_path):
        res = run(profile(tls_server.url, transport, tmp_path, verify_tls=False))
        assert res.summary["counts"]["ok"] == N
        assert res.summary["conditions"]["target"]["tls"] == {"verify": False, "ca_bundle": None}
        write_report(res.run_dir)
        assert "TLS not verified" in (res.run_dir / "report.md").read_text()

    @pytest.mark.timing_absolute
    def test_https_to_a_plain_port_says_it_is_plain_http(self, transport, tmp_path):
        """The handshake to a plain server waits out the connect timeout (1 s here) and says why."""
        with HostileServer("ok") as plain:
            t0 = time.monotonic()
            with pytest.raises(RunError, match=r"plain.HTTP.*use http://"):
                run(
                    profile(
                        plain.url.replace("http://", "https://"), transport, tmp_path, connect_timeout_s=1.0
                    )
                )
            assert_within(
                time.monotonic() - t0, 1.0 + 4.0, "the refusal, after a 1 s connect timeout", unit="s"
            )

    def test_http_to_a_tls_port_says_to_use_https(self, transport, tls_server, tmp_path):
        with pytest.raises(RunError, match=r"if this port speaks TLS, use https://"):
            run(profile(tls_server.url.replace("https://", "http://"), transport, tmp_path))
