"""SimConfig: defaults, presets, and errors that name the field and what is valid."""

from __future__ import annotations

import itertools

import pydantic
import pytest

from loadgen.sim import GPUS, MODELS, SimConfig, SimConfigError, parse_preset


def error_of(d: dict) -> str:
    with pytest.raises(SimConfigError) as e:
        SimConfig.from_dict(d)
    return str(e.value)


class TestPresets:
    @pytest.mark.parametrize(
        "name",
        [
            "llama2-13b-fp16@h200",
            "llama3-8b-fp8@h100",
            "llama3-8b-fp16@a100",
            "llama3-70b-fp8@h200",
            "llama3-8b-fp16@l4",
            "llama3-8b-fp8-kvfp16@h100-sxm",
        ],
    )
    def test_issue_presets_are_valid_configs(self, name):
        """Every preset the issue names builds a config that fits its GPU."""
        assert SimConfig.from_dict({"preset": name}).num_blocks > 0

    def test_every_combination_parses(self):
        """model x precision x gpu all parse, fitting or not."""
        for m, p, g in itertools.product(MODELS, ("fp16", "bf16", "fp8"), GPUS):
            pr = parse_preset(f"{m}-{p}@{g}")
            assert (pr.model.key, pr.precision, pr.gpu.key) == (m, p, g)

    def test_kv_precision_field_overrides_the_preset(self):
        """fp8 KV halves bytes per token and doubles the blocks (roughly)."""
        a = SimConfig(preset="llama2-13b-fp16@a100")
        b = SimConfig(preset="llama2-13b-fp16@a100", kv_precision="fp8")
        assert b.physics.kv_bytes_per_token == a.physics.kv_bytes_per_token / 2
        assert b.num_blocks in (2 * a.num_blocks, 2 * a.num_blocks + 1)

    def test_served_model_name_defaults_to_the_model_card(self):
        assert SimConfig().served_model_name == "meta-llama/Meta-Llama-3-8B-Instruct"
        assert SimConfig(model_name="m").served_model_name == "m"


class TestErrors:
    def test_unknown_preset_lists_models_and_gpus(self):
        msg = error_of({"preset": "llama9-8b-fp16@x100"})
        assert msg.startswith("sim.preset: unknown model 'llama9-8b' and unknown GPU 'x100'; valid: ")
        assert "llama3-70b" in msg and "h200" in msg and "l4" in msg

    def test_unknown_field_is_named(self):
        msg = error_of({"presett": "x"})
        assert msg.startswith("sim.presett: unknown field; valid: preset, ")

    def test_bad_scheduling_lists_choices(self):
        assert "sim.scheduling: " in error_of({"scheduling": "fifo"})
        assert "valid: prefill_first, chunked" in error_of({"scheduling": "fifo"})

    def test_every_problem_is_reported(self):
        msg = error_of({"time_scale": -1, "block_size": 0})
        assert "sim.time_scale: " in msg and "sim.block_size: " in msg

    def test_model_that_does_not_fit_names_the_preset(self):
        msg = error_of({"preset": "llama3-70b-fp16@h100"})
        assert msg.startswith("sim.preset: weights (141.2 GB) do not fit in 80 GB")

    def test_tensor_parallel_makes_it_fit(self):
        assert SimConfig.from_dict({"preset": "llama3-70b-fp16@h100", "tensor_parallel_size": 2})

    def test_max_model_len_beyond_the_model(self):
        assert error_of({"max_model_len": 100_000}).startswith("sim.max_model_len: 100000 exceeds")

    def test_config_error_is_a_value_error(self):
        assert issubclass(SimConfigError, ValueError)

    def test_config_is_frozen(self):
        with pytest.raises(pydantic.ValidationError, match="frozen"):
            SimConfig().time_scale = 2.0


def test_step_budget_must_hold_a_full_decode_batch():
    assert error_of({"max_num_batched_tokens": 64, "max_num_seqs": 128}).startswith(
        "sim.max_num_batched_tokens: 64 cannot decode a full batch"
    )
