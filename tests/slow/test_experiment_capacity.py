"""An experiment whose cells are capacity searches: each repeat is a whole search, and the
ranking reads each search's capacity. The SLA binds where the simulated TPOT reaches 35 ms (17.5 ms
on the wall at time_scale 0.5), near 50 req/s: a search that climbs past 100 req/s meets the
client's own limit on a loaded 2-core machine, and a search stopped there has no capacity to rank."""

from __future__ import annotations

import json

from helpers import TPOT_BOUND_PROFILE, cli


def test_capacity_cells_are_ranked_by_their_searches(tmp_path):
    (tmp_path / "work.yaml").write_text(TPOT_BOUND_PROFILE)
    (tmp_path / "exp.yaml").write_text("""
name: searched
profile: work.yaml
load:
  capacity: {start_rate: 16, stage_duration_s: 2, warmup_s: 1, max_stages: 5, precision: 0.2, confirm_s: 5,
             twin: "off"}
sla: {tpot_ms: 17.5}
attainment: 0.9
repeats: 2
backends:
  - {name: l40s, sim: {preset: llama2-7b-fp16@l40s, time_scale: 0.5}}
""")
    done = cli("experiment", str(tmp_path / "exp.yaml"), "--out", str(tmp_path), "--id", "e", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "e"
    row = json.loads((folder / "experiment.json").read_text())["ranking"]["rows"][0]
    assert row["bases"] == ["capacity search"]
    values = row["figures"]["capacity_rps"]["values"]
    for r, value in enumerate(values, 1):
        cap = json.loads((folder / "l40s" / f"repeat-{r}" / "capacity.json").read_text())
        assert value == cap["capacity_rps"] and value is not None
        assert cap["verdict"] == "confirmed" and cap["confirmations"][-1]["held"]
