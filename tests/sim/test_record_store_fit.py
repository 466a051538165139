"""``loadgen sim fit`` reads a columnar run: the stages it replays from records.parquet are
those it reads from the same records exported as requests.jsonl (the shared reader,
``record_store.read_run_table``), the figures within the store's microsecond."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.analysis import sim_fit
from loadgen.analysis.record_store import export_jsonl
from loadgen.result import REQUESTS, STORE

import helpers


def test_a_columnar_sweep_is_read_for_the_fit_as_its_jsonl_is(tmp_path):
    res = helpers.run(
        helpers.profile(
            tmp_path,
            None,
            **{
                "workload.num_requests": 16,
                "load.concurrency": None,
                "load.sweep": {"concurrency": [1, 4]},
                "output.records": "columnar",
                "sim": {"preset": "llama3-8b-fp16@h100", "time_scale": 0.5},
            },
        )
    )
    assert (res.run_dir / STORE).is_file() and not (res.run_dir / REQUESTS).exists()
    columnar = sim_fit.read_run(res.run_dir)
    export_jsonl(res.run_dir / STORE, res.run_dir / REQUESTS)
    (res.run_dir / STORE).unlink()
    jsonl = sim_fit.read_run(res.run_dir)
    assert [s.name for s in columnar.stages] == [s.name for s in jsonl.stages] and len(jsonl.stages) == 2
    for a, b in zip(columnar.stages, jsonl.stages):
        assert (a.concurrency, a.opens, a.cut_ns) == (b.concurrency, b.opens, b.cut_ns)
        for name in ("prompts", "outputs", "sends_ns", "warmup"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert a.measured.keys() == b.measured.keys()
        for k, v in a.measured.items():
            assert v == pytest.approx(b.measured[k], abs=1e-3), k  # ms: the store's 1 us
