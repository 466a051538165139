"""A LoRA mix run end to end on the built-in simulator: each record names the model it asked
for, an adapter the server does not serve is an http_404, and the per-model rows add up."""

from __future__ import annotations

from collections import Counter

from loadgen.records import read_records
from loadgen.result import REQUESTS

import helpers


def test_mix_records_models_and_unknown_adapter_is_404(tmp_path):
    """Round robin over base, a served adapter and an unknown one: 4 requests each, the unknown
    one's all http_404; per-model sent/ok/failed sum exactly to the run's counts."""
    profile = helpers.profile(
        tmp_path,
        None,
        **{
            "sim": {"model_name": "base", "lora_adapters": ["sql-lora"], "time_scale": 0.0},
            "target.model": "base",
            "workload.num_requests": 12,
            "load.warmup_requests": 0,
            "workload.models": {"choice": "round_robin", "mix": ["base", "sql-lora", "nope"]},
        },
    )
    res = helpers.run(profile)
    records = list(read_records(res.run_dir / REQUESTS))
    assert Counter((r.model, r.ok, r.error_class) for r in records) == {
        ("base", True, None): 4,
        ("sql-lora", True, None): 4,
        ("nope", False, "http_404"): 4,
    }
    s = res.summary
    rows = s["models"]["by_model"]
    assert [(r["model"], r["sent"], r["ok"], r["failed"]) for r in rows] == [
        ("base", 4, 4, 0),
        ("sql-lora", 4, 4, 0),
        ("nope", 4, 0, 4),
    ]
    for key in ("sent", "ok", "failed"):
        assert sum(r[key] for r in rows) == s["counts"][key]
    total = s["metrics"]["output_tokens_per_s"]
    assert abs(sum(r["output_tokens_per_s"] or 0.0 for r in rows) - total) < 1e-9 * total


def test_run_without_a_mix_has_no_models_block(tmp_path):
    """No workload.models: records name no model and the summary has no models block."""
    res = helpers.run(helpers.profile(tmp_path, None, sim={"time_scale": 0.0}, load__warmup_requests=0))
    assert "models" not in res.summary
    assert {r.model for r in read_records(res.run_dir / REQUESTS)} == {None}
