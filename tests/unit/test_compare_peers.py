"""``compare`` with other tools' result files: a workload difference only where both sides have
the statistic, and a damaged file (a wrong type, a negative count or rate, broken JSON) is an
error naming the file and the field, which ``loadgen compare`` prints and exits 2 on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import loadgen
from loadgen.analysis.compare_peers import same_stats
from loadgen.cli.main import EXIT_BAD_INPUT, main
from loadgen.errors import ResultError

PEERS = Path(__file__).parents[1] / "fixtures" / "peer_results"
BASE = Path(__file__).parents[1] / "fixtures" / "runs" / "base-a"
VLLM = PEERS / "vllm" / "openai-chat-infqps-concurrency8-tiny-llama-20260112-141503.json"
AIPERF = PEERS / "aiperf" / "aiperf-0.13.0-c4" / "profile_export_aiperf.json"
GUIDELLM = PEERS / "guidellm" / "guidellm-0.8.1-c4" / "benchmarks.json"
IPERF = PEERS / "inference_perf" / "inference-perf-0.7.0-concurrent"


def raw(path: Path) -> dict:
    return json.loads(path.read_text())


def vllm_file(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(raw(VLLM) | fields))
    return path


class TestSameStats:
    def test_a_mean_alone_agrees_with_a_distribution_of_that_mean(self):
        """The peer's mean 64 beside loadgen's mean 64 with percentiles: not a difference."""
        assert same_stats([{"mean": 64.0, "p50": 64.0, "p99": 64.0}, {"mean": 64}])

    def test_a_shared_statistic_that_differs_is_a_difference(self):
        assert not same_stats([{"mean": 64.0, "p99": 70.0}, {"mean": 64.0, "p99": 66.0}])
        assert not same_stats([{"mean": 64.0}, {"mean": 63.5}])

    def test_values_that_are_not_distributions_compare_whole(self):
        assert same_stats([8, 8]) and not same_stats([8, 16]) and not same_stats([{"mean": 8}, 8])


class TestWorkloadWarning:
    def test_the_same_mean_warns_nothing(self, tmp_path):
        """base-a realised 67 prompt and 24 output tokens per request; a vLLM file of the same
        totals (its means only) differs on no length."""
        path = vllm_file(tmp_path, completed=120, total_input_tokens=120 * 67, total_output_tokens=120 * 24)
        cmp = loadgen.compare([BASE, path])
        fields = {d.field for d in cmp.conditions}
        assert not {f for f in fields if f.startswith("lengths.")}
        assert not any("lengths." in w for w in cmp.warnings)

    def test_a_different_mean_warns(self, tmp_path):
        path = vllm_file(tmp_path, completed=120, total_input_tokens=120 * 67, total_output_tokens=120 * 25)
        cmp = loadgen.compare([BASE, path])
        diff = {d.field: d.values for d in cmp.conditions}
        assert diff["lengths.realised.server_output_tokens"][1] == {"mean": 25.0}
        assert "lengths.realised.server_prompt_tokens" not in diff
        assert any("workloads differ (lengths.realised.server_output_tokens" in w for w in cmp.warnings)


def _set(data: dict, dotted: str, value) -> None:
    keys = dotted.split("/")
    node = data
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[keys[-1]] = value


# (fixture, file name inside it, "/"-separated key path to spoil, value, the field the error names,
# what it says)
BROKEN = [
    (AIPERF, None, "time_to_first_token", "fast", "time_to_first_token", "is not an object (got 'fast')"),
    (AIPERF, None, "time_to_first_token", [1, 2], "time_to_first_token", "is not an object (got a list)"),
    (AIPERF, None, "time_to_first_token/avg", "x", "time_to_first_token.avg", "is not a number (got 'x')"),
    (AIPERF, None, "request_count/avg", -5, "request_count.avg", "is negative (-5)"),
    (AIPERF, None, "input_token_throughput/avg", -1.5, "input_token_throughput.avg", "is negative (-1.5)"),
    (
        GUIDELLM,
        None,
        "benchmarks/0/metrics/request_totals/errored",
        -5,
        "benchmarks.0.metrics.request_totals.errored",
        "is negative (-5)",
    ),
    (
        GUIDELLM,
        None,
        "benchmarks/0/metrics/time_to_first_token_ms/successful/mean",
        "x",
        "benchmarks.0.metrics.time_to_first_token_ms.successful.mean",
        "is not a number (got 'x')",
    ),
    (IPERF, "summary_lifecycle_metrics.json", "successes/count", -5, "successes.count", "is negative (-5)"),
    (
        IPERF,
        "summary_lifecycle_metrics.json",
        "successes/latency/time_to_first_token",
        {"mean": "x"},
        "successes.latency.time_to_first_token.mean",
        "is not a number (got 'x')",
    ),
    (
        IPERF,
        "stage_1_lifecycle_metrics.json",
        "successes/throughput/requests_per_sec",
        -2.0,
        "successes.throughput.requests_per_sec",
        "is negative (-2)",
    ),
    (VLLM, None, "p99_ttft_ms", "fast", "p99_ttft_ms", "is not a number (got 'fast')"),
    (VLLM, None, "completed", -5, "completed", "is negative (-5)"),
    (VLLM, None, "request_throughput", True, "request_throughput", "is not a number (got True)"),
]


def spoil(tmp_path: Path, fixture: Path, inner: str | None, key: str, value) -> tuple[Path, Path]:
    """(the path to compare, the file spoiled): a copy of ``fixture`` with ``key`` set to ``value``."""
    if fixture.is_dir():
        folder = tmp_path / fixture.name
        shutil.copytree(fixture, folder)
        target = folder / (inner or "summary_lifecycle_metrics.json")
        given = folder
    else:
        folder = tmp_path / fixture.parent.name
        folder.mkdir()
        target = given = folder / fixture.name
        shutil.copy(fixture, target)
    data = raw(target)
    _set(data, key, value)
    target.write_text(json.dumps(data))
    return given, target


class TestStrict:
    @pytest.mark.parametrize(("fixture", "inner", "key", "value", "field", "says"), BROKEN)
    def test_a_wrong_type_or_a_negative_names_the_file_and_field(
        self, tmp_path, fixture, inner, key, value, field, says
    ):
        given, target = spoil(tmp_path, fixture, inner, key, value)
        with pytest.raises(ResultError) as err:
            loadgen.compare([BASE, given])
        message = str(err.value)
        assert message.startswith(f"{target}: not a readable ")
        assert f" result: field {field} {says}" in message and "\n" not in message

    def test_loadgen_compare_exits_2_with_the_message(self, tmp_path, capsys):
        """The CLI prints the one-line error (no traceback, no table, no "ok -5") and exits 2."""
        given, target = spoil(tmp_path, IPERF, None, "successes/count", -5)
        code = main(["compare", str(BASE), str(given), "-o", str(tmp_path / "out")])
        out, err = capsys.readouterr()
        assert code == EXIT_BAD_INPUT == 2
        assert (
            f"{target}: not a readable inference-perf result: field successes.count is negative (-5)" in err
        )
        assert "Traceback" not in err and "| ok |" not in out and not (tmp_path / "out").exists()

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ("", "the file is empty, so it holds no result"),
            ('{"completed": 198, "dur', "invalid JSON at byte 23 (line 1, column 24)"),
        ],
    )
    def test_empty_or_truncated_json_is_named_with_its_position(self, tmp_path, capsys, text, says):
        path = tmp_path / "vllm.json"
        path.write_text(text)
        code = main(["compare", str(BASE), str(path), "-o", str(tmp_path / "out")])
        assert code == 2 and f"{path}: {says}" in capsys.readouterr().err
