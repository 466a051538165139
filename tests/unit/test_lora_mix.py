"""LoRA mixes on the client side: the profile's workload.models, the seeded draw of each
request's model, the record that keeps it, and the summary's and report's per-model rows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from loadgen.analysis.models import models
from loadgen.analysis.table import RecordTable
from loadgen.config import ConfigError, WorkloadConfig, load_profile
from loadgen.records import RequestRecord, read_records, write_records
from loadgen.report.models import models_section
from loadgen.workload import Workload

from helpers import failed_record, ok_record


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    return info.value.problems


def workload(**kw) -> Workload:
    return Workload(WorkloadConfig.model_validate({"num_requests": 10, **kw}))


class TestProfile:
    def test_shorthand_list_is_a_weighted_mix(self):
        """A bare list of names and {name, weight} entries is choice: weighted, weight 1 by default."""
        cfg = WorkloadConfig.model_validate(
            {"num_requests": 1, "models": ["base", {"name": "sql", "weight": 3}]}
        )
        assert cfg.models is not None
        assert (cfg.models.choice, cfg.models.names) == ("weighted", ("base", "sql"))
        assert [m.weight for m in cfg.models.mix] == [1.0, 3.0]

    def test_repeated_name_is_an_error_naming_the_field(self, tmp_path):
        """Two entries with one name: the error names workload.models.mix and the name."""
        got = problems(tmp_path, "workload: {num_requests: 2, models: [a, b, a]}\nload: {concurrency: 1}\n")
        assert got == ["workload.models.mix: names must be unique; repeated: a"]

    def test_weight_must_be_positive(self, tmp_path):
        """A weight of 0 is an error at its own path."""
        got = problems(
            tmp_path,
            "workload: {num_requests: 2, models: [a, {name: b, weight: 0}]}\nload: {concurrency: 1}\n",
        )
        assert got[0] == "workload.models.mix[1].weight: must be > 0.0, got 0"

    def test_round_robin_takes_no_weights(self, tmp_path):
        """Weights under round_robin would be ignored silently, so they are an error."""
        text = (
            "workload: {num_requests: 2, models: {choice: round_robin, mix: [a, {name: b, weight: 2}]}}\n"
            "load: {concurrency: 1}\n"
        )
        assert problems(tmp_path, text) == [
            "workload.models.mix: weights apply to choice: weighted; round_robin takes each name in turn"
        ]

    def test_endpoint_without_a_model_per_request_is_refused(self, tmp_path):
        """SGLang's native generate names no model in its body: a mix over it is an error."""
        text = (
            "target: {endpoint: sglang_generate, model: m}\n"
            "workload: {num_requests: 2, models: [a, b]}\nload: {concurrency: 1}\n"
        )
        assert problems(tmp_path, text) == [
            "workload.models: endpoint sglang_generate does not name the model per request; "
            "use chat, completions, responses, messages"
        ]


class TestDraw:
    def test_no_mix_asks_for_no_model(self):
        """Without workload.models every spec leaves the model to target.model."""
        assert {s.model for s in workload().take(20)} == {None}

    def test_round_robin_cycles_in_order(self):
        """round_robin: request i asks for mix[i % n]."""
        w = workload(models={"choice": "round_robin", "mix": ["a", "b", "c"]})
        assert [s.model for s in w.take(7)] == ["a", "b", "c", "a", "b", "c", "a"]

    @pytest.mark.slow
    def test_weighted_draw_is_a_function_of_seed_and_index(self):
        """Two workloads of one seed draw the same sequence, in any order; another seed differs."""
        mix = {"models": [{"name": "base", "weight": 3}, "sql-lora"]}
        a, b = workload(seed=5, **mix), workload(seed=5, **mix)
        forward = [a.request(i).model for i in range(3000)]
        assert [b.request(i).model for i in reversed(range(3000))][::-1] == forward
        assert [workload(seed=6, **mix).request(i).model for i in range(3000)] != forward

    def test_weighted_draw_follows_the_weights(self):
        """Weights 3:1 over 8000 requests: base's share within 0.02 of 0.75 (about 4 standard errors)."""
        w = workload(seed=1, models=[{"name": "base", "weight": 3}, "sql-lora"])
        counts = Counter(w.request(i).model for i in range(8000))
        assert set(counts) == {"base", "sql-lora"}
        assert abs(counts["base"] / 8000 - 0.75) < 0.02

    def test_mix_moves_no_length(self):
        """Adding a mix draws from its own stream: the lengths and prompts stay the same."""
        plain, mixed = workload(seed=3), workload(seed=3, models=["a", "b"])
        for i in range(50):
            p, m = plain.request(i), mixed.request(i)
            assert (p.prompt, p.prompt_tokens, p.output_tokens) == (
                m.prompt,
                m.prompt_tokens,
                m.output_tokens,
            )


class TestRecord:
    def test_model_round_trips_and_old_records_load(self, tmp_path):
        """The model survives requests.jsonl; a line written before the field existed reads as None."""
        path = tmp_path / "requests.jsonl"
        write_records(path, [ok_record(0, model="sql-lora")])
        with open(path, "ab") as fh:
            fh.write(
                b'{"id": 1, "warmup": false, "t_sched_ns": 0, "t_send_ns": 0, '
                b'"requested_output_tokens": 4, "requested_prompt_tokens": 10}\n'
            )
        assert [r.model for r in read_records(path)] == ["sql-lora", None]


def mixed_records() -> list[RequestRecord]:
    """Base: 2 ok (TTFT 100, 120) and 1 failed; sql-lora: 1 ok (TTFT 300), 1 cancelled; a warm-up."""
    failed = failed_record(3, send_ms=0)
    failed.model = "base"
    cancelled = failed_record(5, send_ms=0, error_class="cancelled")
    cancelled.model = "sql-lora"
    return [
        ok_record(0, ttft_ms=100, model="base"),
        ok_record(1, ttft_ms=120, model="base"),
        ok_record(2, ttft_ms=300, model="sql-lora"),
        failed,
        cancelled,
        ok_record(6, ttft_ms=900, model="sql-lora", warmup=True),
    ]


class TestBreakdown:
    def test_rows_partition_the_measured_requests(self):
        """Counts per model add up to the run's (warm-up left out); TTFT is each model's own."""
        block = models(RecordTable.from_records(mixed_records()), ("base", "sql-lora"), "weighted", 2.0, None)
        assert block is not None
        rows = {r["model"]: r for r in block["by_model"]}
        assert [(r["sent"], r["ok"], r["failed"]) for r in rows.values()] == [(3, 2, 1), (2, 1, 0)]
        assert rows["base"]["ttft_ms"] == {"p50": 110.0, "p99": 119.8}
        assert rows["sql-lora"]["ttft_ms"] == {"p50": 300.0, "p99": 300.0}
        # 6 output tokens a request, over a 2 s window: the rates add up to the run's as well.
        assert (rows["base"]["output_tokens_per_s"], rows["sql-lora"]["output_tokens_per_s"]) == (6.0, 3.0)
        assert rows["base"]["goodput_requests_per_s"] == 1.0

    def test_no_record_with_a_model_is_no_block(self):
        """A run without a mix has no models block."""
        assert models(RecordTable.from_records([ok_record(0)]), ("a",), "weighted", 1.0, None) is None

    def test_report_section_has_a_row_per_model(self):
        """The report's Models section shows each row's counts and TTFT p50, in the mix's order."""
        block = models(RecordTable.from_records(mixed_records()), ("base", "sql-lora"), "weighted", 2.0, None)
        section = models_section({"models": block})  # type: ignore[typeddict-item]
        assert section is not None
        table = section.blocks[1]
        assert [row[:5] for row in table.rows] == [  # type: ignore[attr-defined]
            ("base", "3", "2", "1", "110.00"),
            ("sql-lora", "2", "1", "0", "300.00"),
        ]
        assert models_section({}) is None  # type: ignore[typeddict-item]
