"""What a tracked run logs (loadgen.tracking.facts), from tiny literal summaries, and the checks
made before any load: a missing backend, a URI with a login."""

from __future__ import annotations

import pytest

from loadgen.config import load_profile
from loadgen.errors import ConfigError
from loadgen.redact import Scrubber
from loadgen.tracking import MissingBackend, TrackingError, check_uri, facts, shown_uri
from loadgen.tracking import base as tracking_base


class TestParams:
    def test_conditions_flatten_to_dotted_text(self):
        """Nested conditions become dotted names; a string stays as it is, the rest compact JSON."""
        summary = {
            "conditions": {
                "seed": 3,
                "target": {"model": "m", "tls": None, "builtin_simulator": {}},
                "labels": {"gpu": "H200"},
                "load": {"stages": [1, 2], "ok": True},
            }
        }
        assert facts.params(summary) == {
            "seed": "3",
            "target.model": "m",
            "target.tls": "null",
            "target.builtin_simulator": "{}",
            "labels.gpu": "H200",
            "load.stages": "[1,2]",
            "load.ok": "true",
        }

    def test_a_long_value_is_cut_and_says_its_length(self):
        """A value over MAX_VALUE ends with its full length, within MAX_VALUE characters."""
        got = facts.params({"conditions": {"a": "x" * 900}})["a"]
        assert len(got) == facts.MAX_VALUE
        assert got.endswith("... (900 chars)")
        assert got.startswith("x" * 100)

    def test_a_key_keeps_only_characters_both_backends_take(self):
        """Characters outside letters, digits and ``_-. /:`` become ``_``; a key stops at MAX_KEY."""
        got = facts.params({"conditions": {"info": {"vllm:cache{x=1}": 1}, "k" * 300: 2}})
        assert got["info.vllm:cache_x_1_"] == "1"
        assert "k" * facts.MAX_KEY in got

    def test_secrets_never_reach_a_parameter(self):
        """A value the scrubber knows (a header's, the API key) and a URL's login are masked."""
        scrub = Scrubber({"Authorization": "Bearer sk-abcdef"}, extra=["key-123456"])
        summary = {
            "conditions": {
                "server": {"echo": "got Bearer sk-abcdef from you", "key": "key-123456"},
                "target": {"url": "http://bob:hunter22@10.0.0.5:8000/v1"},
            }
        }
        got = facts.params(summary, scrub)
        assert got == {
            "server.echo": "got *** from you",
            "server.key": "***",
            "target.url": "http://***@10.0.0.5:8000/v1",
        }


class TestMetrics:
    def test_headline_figures_exactly_as_the_summary_holds_them(self):
        """The headline (gate names), goodput, counts and the verdict; absent or null ones left out."""
        summary = {
            "metrics": {
                "ttft_ms": {"p50": 12.5, "p99": 40.25},
                "tpot_ms": {"p50": 7.125, "p99": None},
                "request_throughput_rps": 1.8688891309946505,
                "output_tokens_per_s": 272.5,
                "goodput": {"requests_per_s": 1.5, "output_tokens_per_s": 250.0, "attained_fraction": 0.75},
            },
            "counts": {"sent": 8, "ok": 6, "failed": 2, "error_rate": 0.25},
            "sla": {"verdict": "fail"},
        }
        assert facts.metrics(summary) == {
            "p50 ttft_ms": 12.5,
            "p99 ttft_ms": 40.25,
            "p50 tpot_ms": 7.125,
            "request_throughput_rps": 1.8688891309946505,
            "output_tokens_per_s": 272.5,
            "goodput_rps": 1.5,
            "error_rate": 0.25,
            "goodput_output_tokens_per_s": 250.0,
            "goodput_attained_fraction": 0.75,
            "sent": 8.0,
            "ok": 6.0,
            "failed": 2.0,
            "sla_pass": 0.0,
        }

    def test_no_verdict_no_sla_metric(self):
        """An incomplete run's verdict is neither pass nor fail: no sla_pass."""
        assert "sla_pass" not in facts.metrics({"sla": {"verdict": "incomplete"}})


class TestBeforeTheLoad:
    def test_a_backend_not_installed_names_its_extra(self, monkeypatch):
        """--track with the library missing: MissingBackend, pip install loadgen[<kind>]."""
        monkeypatch.setitem(tracking_base.BACKENDS, "mlflow", "loadgen_no_such_module")
        with pytest.raises(MissingBackend, match=r"pip install 'loadgen\[mlflow\]'"):
            tracking_base.check_installed("mlflow")

    def test_a_uri_with_a_login_is_refused(self):
        """The URI is written to tracking.json and the profile: a password in it would be too."""
        with pytest.raises(TrackingError, match=r"http://\*\*\*@mlflow:5000.*MLFLOW_TRACKING_USERNAME"):
            check_uri("http://me:pw@mlflow:5000")
        assert check_uri("sqlite:////tmp/x/mlflow.db") == "sqlite:////tmp/x/mlflow.db"
        assert shown_uri("sqlite:////tmp/x/mlflow.db") == "sqlite:////tmp/x/mlflow.db"

    def test_the_profile_refuses_a_login_in_output_track_uri(self):
        """output.track_uri with user:password is a profile error naming the field."""
        with pytest.raises(ConfigError) as err:
            load_profile(None, overrides={"output.track": "mlflow", "output.track_uri": "http://a:b@h:5000"})
        assert "output.track_uri" in str(err.value)
        assert "MLFLOW_TRACKING_USERNAME" in str(err.value)
