"""The dry run's estimate: a cell's stages, their drains, its start and a server's, and, once an
earlier run of the same file is in the output folder, that run's measured cells instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.experiment import cells, estimate, run
from loadgen.experiment.spec import load_experiment
from loadgen.experiment.state import DONE, State

WORKLOAD = """
name: tiny
target: {endpoint: chat, ignore_eos: true}
workload: {seed: 0, input_tokens: 64, output_tokens: 8}
load: {concurrency: 1}
"""
SWEEP = """
name: plan
profile: work.yaml
load: {sweep: {concurrency: [1, 2], stage_duration_s: 5, ramp_s: 1}}
sla: {ttft_ms: 700}
repeats: 2
backends:
  - {name: a, sim: "llama3-8b-fp16@{gpu}", matrix: {gpu: [h100, a100]}}
  - {name: v, serve: "python -m loadgen sim --port {port}"}
"""
STAGES = """
name: staged
profile: work.yaml
load:
  stages:
    - {concurrency: 4, duration_s: 10, ramp_s: 2, warmup_requests: 8}
    - {rate: 4, num_requests: 20, warmup_requests: 4}
sla: {ttft_ms: 700}
repeats: 1
backends:
  - {name: a, sim: "llama3-8b-fp16@h100"}
"""


def write(tmp: Path, body: str, name: str = "exp.yaml") -> Path:
    (tmp / "work.yaml").write_text(WORKLOAD)
    path = tmp / name
    path.write_text(body)
    return path


def test_a_sweep_cell_is_its_stages_with_their_drains_and_its_start(tmp_path):
    """Two 5 s stages (their 1 s ramps run inside them): 0.6 + 2 x (5 + 0.9) = 12.4 s a simulator
    cell; a serve: cell adds its server's 30 s start."""
    src = write(tmp_path, SWEEP)
    got = {(x.cell.config.id, x.cell.repeat): x.expected_s for x in run.plan(load_experiment(src), src)}
    assert got == {
        ("a--gpu=h100", 1): pytest.approx(12.4),
        ("a--gpu=a100", 1): pytest.approx(12.4),
        ("v", 1): pytest.approx(42.4),
        ("a--gpu=h100", 2): pytest.approx(12.4),
        ("a--gpu=a100", 2): pytest.approx(12.4),
        ("v", 2): pytest.approx(42.4),
    }
    assert estimate.finish_seconds(None) == 3.0


def test_a_counted_stage_lasts_its_requests_and_warm_up_at_its_rate(tmp_path):
    """A 10 s stage (ramp and warm-up inside it) and 20 + 4 warm-up requests at 4 req/s (6 s):
    0.6 + (10 + 0.9) + (6 + 0.9) = 18.4 s."""
    src = write(tmp_path, STAGES)
    (line,) = run.plan(load_experiment(src), src)
    assert line.expected_s == pytest.approx(18.4)
    assert line.measured is False


def _ran(folder_parent: Path, src: Path, seconds: dict[str, list[float]], eid: str = "e1") -> State:
    """An experiment folder made from ``src`` whose cells of each configuration took ``seconds``."""
    exp = load_experiment(src)
    state = run.start(exp, src, folder_parent, eid)
    left = {k: list(v) for k, v in seconds.items()}
    for cell in cells.cells(exp):
        if not left.get(cell.config.id):
            continue
        took = left[cell.config.id].pop(0)
        state.update(
            cell.id,
            state=DONE,
            started_at="2026-12-07T15:00:00.000+00:00",
            ended_at=f"2026-12-07T15:00:{took:06.3f}+00:00",
        )
    return state


def test_an_earlier_run_of_the_same_file_gives_the_measured_cells(tmp_path):
    """reports/ holds a run of this very file: each configuration's cells are expected to take
    the mean of its measured cells (20 and 22 s: 21 s); a configuration it did not finish keeps
    the model's figure."""
    src = write(tmp_path, SWEEP)
    out = tmp_path / "reports"
    _ran(out, src, {"a--gpu=h100": [20.0, 22.0], "v": [50.0]})
    earlier = estimate.earlier_run(out, src)
    assert earlier is not None and earlier.folder == out / "e1" and earlier.cells == 3
    got = {
        (x.cell.config.id, x.cell.repeat): (x.expected_s, x.measured)
        for x in run.plan(load_experiment(src), src, earlier)
    }
    assert got[("a--gpu=h100", 1)] == (pytest.approx(21.0), True)
    assert got[("v", 2)] == (pytest.approx(50.0), True)
    assert got[("a--gpu=a100", 1)] == (pytest.approx(12.4), False)


def test_a_run_of_another_version_of_the_file_is_not_a_measurement(tmp_path):
    """The file changed since (another SHA-256): its old cells say nothing of the new ones."""
    src = write(tmp_path, SWEEP)
    out = tmp_path / "reports"
    _ran(out, src, {"a--gpu=h100": [20.0, 22.0]})
    src.write_text(SWEEP.replace("stage_duration_s: 5", "stage_duration_s: 50"))
    assert estimate.earlier_run(out, src) is None
    assert estimate.earlier_run(tmp_path / "absent", src) is None


def test_the_finish_is_measured_from_the_last_cell_to_the_last_write(tmp_path):
    """A complete experiment's finish (pooling, ranking, report): its file's last write after its
    last cell's end, 1.5 s here."""
    src = write(tmp_path, STAGES)
    state = _ran(tmp_path / "reports", src, {"a": [12.0]})
    data = {**state.data, "complete": True, "updated_at": "2026-12-07T15:00:13.500+00:00"}
    got = estimate.measured(data, state.folder)
    assert got is not None
    assert (got.cell_s, got.cells, got.finish_s) == ({"a": 12.0}, 1, 1.5)
    assert estimate.finish_seconds(got) == 1.5


def test_the_levers_estimate_is_what_its_file_and_guide_quote_and_near_the_measured_run():
    """experiments/levers.yaml and docs/guides/experiments.md quote the measured run (298 s on 2
    cores) and the dry run's figure; the estimate, from the stages alone, is that figure and
    within 25 % of the run."""
    root = Path(__file__).resolve().parents[2]
    src = root / "experiments" / "levers.yaml"
    lines = run.plan(load_experiment(src), src)
    total = sum(x.expected_s for x in lines) + estimate.finish_seconds(None)
    assert total == pytest.approx(24 * (0.6 + 3 * (3 + 0.9)) + 3.0)
    header = src.read_text()
    guide = (root / "docs" / "guides" / "experiments.md").read_text()
    assert "# 298 s (5.0 min), measured on 2 cores" in header
    assert f"--dry-run  # the plan; it expects {total / 60:.1f} min" in header
    assert "(298 s on 2 cores)" in guide and f"the expected time ({total / 60:.1f} min)" in guide
    assert "it ran in 298 s (4 min 58 s" in guide and f"the dry run said {total / 60:.1f} min" in guide
    assert abs(total - 298) / 298 <= 0.25
