"""The profile schema: shipped profiles, friendly errors with YAML paths, overrides."""

from pathlib import Path

import pydantic
import pytest

from loadgen.config import ConfigError, FixedLength, LognormalLength, SlaRule, apply_override, load_profile

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
MINIMAL = "workload: {num_requests: 10}\nload: {concurrency: 2}\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str, **kw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_profile(write(tmp_path, text), **kw)
    return info.value.problems


class TestShippedProfiles:
    @pytest.mark.parametrize(
        "name", ["chat", "long-context", "code-completion", "ci-smoke", "vision", "speech"]
    )
    def test_loads(self, name):
        """Every shipped profile validates and leaves target.url to the command line."""
        profile = load_profile(PROFILES / f"{name}.yaml")
        assert profile.name == name
        assert profile.target.url is None

    def test_chat_values(self):
        """The chat profile carries the documented lengths, load and SLA."""
        p = load_profile(PROFILES / "chat.yaml")
        assert p.workload.input_tokens == LognormalLength(mean=512, sigma=0.6, max=4096)
        assert (p.load.concurrency, p.load.rate, p.workload.num_requests) == (8, None, 200)
        assert [r.text() for r in p.sla.rules] == ["p99 ttft_ms < 700", "p99 tpot_ms < 50"]


class TestErrors:
    def test_unknown_key(self, tmp_path):
        """A typo names its dotted path, suggests the near key and lists the valid ones."""
        assert problems(tmp_path, MINIMAL + "target: {urll: x}\n") == [
            "target.urll: unknown key; did you mean 'url'? valid keys here: url, urls, balance, eject_after, "
            "eject_s, endpoint, "
            "model, api_key_env, headers, extra_body, ignore_eos, require_done, preflight, include_usage, "
            "continuous_usage_stats, prompt_format, context_overflow, transport, timeout_s, "
            "connect_timeout_s, read_timeout_s, ca_bundle, verify_tls, secret_headers, reset_path, template, "
            "template_file, payloads"
        ]

    def test_bad_literal(self, tmp_path):
        """A misspelt choice lists the valid choices."""
        text = "workload: {num_requests: 10}\nload: {rate: 2, arrival: possion}\n"
        assert problems(tmp_path, text) == ["load.arrival: 'possion' is not one of poisson, constant, gamma"]

    def test_neither_concurrency_nor_rate(self, tmp_path):
        """A load section with no shape says to choose one and how to spell each."""
        assert problems(tmp_path, "workload: {num_requests: 10}\n") == [
            "load: set exactly one of concurrency or rate (closed loop: `load.concurrency: 8` "
            "or --concurrency 8; open loop: `load.rate: 4.0` (requests/s) or --rate 4)"
        ]

    def test_both_concurrency_and_rate(self, tmp_path):
        """Setting both concurrency and rate is refused."""
        text = "workload: {num_requests: 10}\nload: {rate: 2, concurrency: 3}\n"
        assert problems(tmp_path, text)[0].startswith(
            "load: concurrency and rate are both set; set exactly one"
        )

    def test_empty_profile_says_what_is_missing(self, tmp_path):
        """An empty file lists both missing stop condition and load shape."""
        found = problems(tmp_path, "")
        assert [p.split(":")[0] for p in found] == ["workload", "load"]
        assert found[0] == (
            "workload: set num_requests or duration_s (or both: the run stops at whichever comes first)"
        )

    def test_bad_rule(self, tmp_path):
        """An unparsable rule names sla.rules[i] and shows the grammar."""
        found = problems(tmp_path, MINIMAL + "sla: {rules: ['p99 ttft_ms < 700', 'fast please']}\n")
        assert found == [
            "sla.rules[1]: cannot parse rule 'fast please'; grammar: '[stat] metric op "
            "threshold', e.g. 'p99 ttft_ms < 700' or 'error_rate < 0.01'; stat: p50, p90, p95, "
            "p99, p99_9, mean, max, min; op: <, <=, >, >="
        ]

    def test_bad_length_kind(self, tmp_path):
        """An unknown distribution kind lists the valid kinds at the .kind path."""
        text = "workload: {num_requests: 1, input_tokens: {kind: gauss}}\nload: {rate: 1}\n"
        assert problems(tmp_path, text) == [
            "workload.input_tokens.kind: unknown 'gauss'; valid: fixed, uniform, normal, lognormal, empirical"
        ]

    def test_bound_inside_union(self, tmp_path):
        """An error inside a distribution is reported without pydantic's union tag in the path."""
        text = (
            "workload: {num_requests: 1, output_tokens: {kind: uniform, min: 9, max: 3}}\nload: {rate: 1}\n"
        )
        assert problems(tmp_path, text) == ["workload.output_tokens.max: must be >= min (9), got 3"]

    def test_token_ids_need_completions(self, tmp_path):
        """token_ids on the chat endpoint is refused at target.prompt_format."""
        found = problems(tmp_path, MINIMAL + "target: {prompt_format: token_ids}\n")
        assert found == [
            "target.prompt_format: token_ids needs endpoint: completions or "
            "sglang_generate (the chat endpoint only takes text messages)"
        ]

    def test_token_ids_go_to_sglang_but_not_triton(self, tmp_path):
        """SGLang's /generate takes input_ids; Triton's generate extension only text_input."""
        ok = MINIMAL + "target: {prompt_format: token_ids, endpoint: sglang_generate}\n"
        assert load_profile(write(tmp_path, ok)).target.endpoint == "sglang_generate"
        found = problems(
            tmp_path, MINIMAL + "target: {prompt_format: token_ids, endpoint: triton_generate}\n"
        )
        assert found == [
            "target.prompt_format: token_ids needs endpoint: completions or "
            "sglang_generate (Triton's generate extension only takes text_input)"
        ]

    def test_api_key_is_not_echoed(self, tmp_path):
        """A key given as api_key_env is refused, and the message never repeats the key."""
        found = problems(tmp_path, MINIMAL + "target: {api_key_env: sk-secret123}\n")
        assert found[0].startswith("target.api_key_env: this looks like a key")
        assert "OPENAI_API_KEY" in found[0]
        assert "sk-secret123" not in found[0]

    def test_yaml_syntax_error(self, tmp_path):
        """A YAML syntax error gives the file, line and column."""
        with pytest.raises(ConfigError) as info:
            load_profile(write(tmp_path, "load:\n  rate: [1, 2\nworkload: {}\n"))
        assert str(info.value) == (
            f"{tmp_path / 'p.yaml'}: invalid profile\n  - line 3, "
            "column 9: YAML syntax error: expected ',' or ']', but got ':'"
        )

    def test_duplicate_key(self, tmp_path):
        """A repeated key is an error rather than silently keeping the last one."""
        assert problems(tmp_path, MINIMAL + "load: {rate: 1}\n") == [
            "line 3, column 1: YAML syntax error: duplicate key 'load'"
        ]

    def test_top_level_list(self, tmp_path):
        """A YAML list at the top level is refused."""
        assert problems(tmp_path, "- 1\n") == [
            "the top level must be a mapping of sections (target, workload, load, sla, ...), got list"
        ]


class TestOverrides:
    def test_set_parses_yaml_scalars(self, tmp_path):
        """--set values are YAML: numbers, strings and lists come out typed; labels stay text."""
        p = load_profile(
            write(tmp_path, MINIMAL),
            sets=[
                "sla.ttft_ms=700",
                "labels.gpu=H200",
                "labels.tp=2",
                'sla.rules=["p99 ttft_ms < 700"]',
                "workload.input_tokens=64",
            ],
        )
        assert p.sla.ttft_ms == 700.0
        assert p.labels == {"gpu": "H200", "tp": "2"}
        assert p.sla.rules == (SlaRule(metric="ttft_ms", stat="p99", op="<", threshold=700),)
        assert p.workload.input_tokens == FixedLength(value=64)

    def test_rate_override_clears_concurrency(self, tmp_path):
        """--set load.rate=8 turns a closed-loop profile into an open-loop one."""
        p = load_profile(write(tmp_path, MINIMAL), sets=["load.rate=8"])
        assert (p.load.rate, p.load.concurrency) == (8.0, None)

    def test_cli_overrides_dict(self, tmp_path):
        """The CLI's dotted overrides apply, with None clearing a setting."""
        p = load_profile(
            write(tmp_path, MINIMAL), {"load.rate": 3, "load.concurrency": None, "target.url": "http://h:1"}
        )
        assert (p.load.rate, p.load.concurrency, p.target.url) == (3.0, None, "http://h:1")

    def test_apply_override_into_scalar(self):
        """Setting a key below a scalar is an error naming both paths."""
        with pytest.raises(ConfigError) as info:
            apply_override({"workload": {"input_tokens": 5}}, "workload.input_tokens.mean", 3)
        assert info.value.problems == [
            "workload.input_tokens.mean: cannot set it, workload.input_tokens is 5, not a mapping"
        ]

    def test_defaults_only_with_sets(self):
        """path None means defaults, which overrides can complete into a valid profile."""
        p = load_profile(None, sets=["workload.duration_s=30", "load.concurrency=1"])
        assert (p.workload.duration_s, p.workload.input_tokens.value) == (30.0, 512)


class TestModel:
    def test_frozen(self):
        """Profiles cannot be changed after validation."""
        p = load_profile(None, {"workload.num_requests": 1, "load.rate": 1})
        with pytest.raises(pydantic.ValidationError):
            p.load.rate = 2.0

    def test_resolved_round_trips(self):
        """resolved() is plain data that validates back to an equal profile."""
        p = load_profile(PROFILES / "chat.yaml")
        assert type(p).model_validate(p.resolved()) == p
        assert p.resolved()["workload"]["input_tokens"]["kind"] == "lognormal"

    def test_rule_text(self):
        """Rules read back as written, with run-level rules taking no stat."""
        assert SlaRule.model_validate("mean tpot_ms <= 50").text() == "mean tpot_ms <= 50"
        assert SlaRule.model_validate("goodput_rps > 5").text() == "goodput_rps > 5"

    def test_empirical_file_relative_to_profile(self, tmp_path):
        """An empirical length file is read relative to the profile that names it."""
        (tmp_path / "lens.txt").write_text("10\n20\n30\n")
        p = load_profile(
            write(tmp_path, MINIMAL.replace("10}", "10, input_tokens: {kind: empirical, file: lens.txt}}"))
        )
        assert p.workload.input_tokens.data == (10, 20, 30)
