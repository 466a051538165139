"""`--track mlflow` and `--track wandb` as a user runs them: a simulator run and a 2-cell
experiment logged to a real MLflow store (SQLite, MLflow's default now) and read back with
MLflow's own client; W&B's offline run file read back with W&B's own record type. The
tracked figures are summary.json's, exactly; a secret sent to the server is nowhere in the
tracker; a tracker that is down costs a warning, not the results."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.tracking import facts

from helpers import cli, cli_env

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

HEADER_SECRET = "sk-header-5e3a9c1f"
KEY_SECRET = "sk-apikey-77b2d4e0"
TINY = ("--num-requests", "6", "--concurrency", "2", "--warmup", "0", "--input-tokens", "64")
TINY += ("--output-tokens", "16", "--ui", "none")


def env() -> dict[str, str]:
    return {**cli_env(), "TRACK_TEST_KEY": KEY_SECRET}


def run(out: Path, run_id: str, *flags: str) -> tuple[int, str]:
    proc = cli(
        "run", "quickstart", *TINY, "--out", str(out), "--run-id", run_id, "--api-key-env", "TRACK_TEST_KEY",
        "--set", f"target.headers.X-Api-Key={HEADER_SECRET}", *flags, env=env(), timeout=180,
    )  # fmt: skip
    return proc.returncode, proc.stderr


def client(out: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")


def runs_of(c: MlflowClient, experiment: str) -> list:
    found = c.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment}"
    return c.search_runs([found.experiment_id])


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def tracked(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tracked")
    code, err = run(out, "r1", "--track", "mlflow")
    assert code == 0, err
    assert "tracked  mlflow run " in err
    return out


class TestRun:
    def test_params_are_the_conditions(self, tracked):
        """Every condition of summary.json is a parameter, as facts flattens it, and nothing else."""
        (got,) = runs_of(client(tracked), "quickstart")
        s = summary(tracked / "r1")
        assert got.data.params == facts.params(s)
        assert got.data.params["profile.load.concurrency"] == "2"
        assert got.data.params["profile.workload.num_requests"] == "6"
        assert got.data.params["target.endpoint"] == "chat"
        assert got.data.params["target.model"] == s["conditions"]["target"]["model"]
        assert got.info.run_name == "r1"
        assert got.info.status == "FINISHED"

    def test_metrics_are_summary_figures_exactly(self, tracked):
        """Each headline figure is the float summary.json holds, to the last bit."""
        (got,) = runs_of(client(tracked), "quickstart")
        s = summary(tracked / "r1")
        m = s["metrics"]
        want = {
            "p50 ttft_ms": m["ttft_ms"]["p50"],
            "p99 ttft_ms": m["ttft_ms"]["p99"],
            "p50 tpot_ms": m["tpot_ms"]["p50"],
            "p99 tpot_ms": m["tpot_ms"]["p99"],
            "p50 itl_ms": m["itl_ms"]["p50"],
            "p99 itl_ms": m["itl_ms"]["p99"],
            "p50 e2e_ms": m["e2e_ms"]["p50"],
            "p99 e2e_ms": m["e2e_ms"]["p99"],
            "request_throughput_rps": m["request_throughput_rps"],
            "output_tokens_per_s": m["output_tokens_per_s"],
            "goodput_rps": m["goodput"]["requests_per_s"],
            "goodput_output_tokens_per_s": m["goodput"]["output_tokens_per_s"],
            "goodput_attained_fraction": m["goodput"]["attained_fraction"],
            "error_rate": s["counts"]["error_rate"],
            "sent": 6,
            "ok": s["counts"]["ok"],
            "failed": s["counts"]["failed"],
            "sla_pass": 1.0 if s["sla"]["verdict"] == "pass" else 0.0,
        }
        assert got.data.metrics == want

    def test_summary_and_reports_are_artifacts(self, tracked, tmp_path):
        """summary.json, report.md and report.html, byte for byte the run folder's."""
        c = client(tracked)
        (got,) = runs_of(c, "quickstart")
        assert sorted(a.path for a in c.list_artifacts(got.info.run_id)) == [
            "report.html",
            "report.md",
            "summary.json",
        ]
        local = Path(c.download_artifacts(got.info.run_id, "summary.json", str(tmp_path)))
        assert local.read_bytes() == (tracked / "r1" / "summary.json").read_bytes()

    def test_no_secret_reaches_the_tracker(self, tracked):
        """The header value and the API key are in no parameter, tag or stored byte."""
        (got,) = runs_of(client(tracked), "quickstart")
        texts = [*got.data.params.values(), *got.data.tags.values()]
        assert got.data.params["profile.target.headers.X-Api-Key"] == "***"
        stored = [tracked / "mlflow.db", *(tracked / "mlartifacts").rglob("*")]
        for secret in (HEADER_SECRET, KEY_SECRET):
            assert not any(secret in t for t in texts)
            assert not any(p.is_file() and secret.encode() in p.read_bytes() for p in stored)


def run_experiment(tmp: Path, eid: str, *flags: str) -> None:
    """A 2-cell experiment (one simulator backend, gpu: [h100, a100]) in ``tmp/eid``."""
    (tmp / "work.yaml").write_text(
        "name: tiny\ntarget: {endpoint: chat, ignore_eos: true}\n"
        "workload: {seed: 0, input_tokens: 64, output_tokens: 16}\n"
        "load: {concurrency: 1, warmup_requests: 0}\n"
    )
    (tmp / "exp.yaml").write_text(
        "name: tracked\nprofile: work.yaml\nload: {stages: [{concurrency: 2, duration_s: 1.5}]}\n"
        "sla: {ttft_ms: 700, tpot_ms: 50}\nrepeats: 1\nbackends:\n"
        "  - name: sim\n    sim: {preset: 'llama3-8b-fp16@{gpu}'}\n    matrix: {gpu: [h100, a100]}\n"
    )
    proc = cli(
        "experiment", str(tmp / "exp.yaml"), "--out", str(tmp), "--id", eid,
        "--api-key-env", "TRACK_TEST_KEY", *flags, env=env(), timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    """The 2-cell experiment run with --track mlflow."""
    tmp = tmp_path_factory.mktemp("exp")
    run_experiment(tmp, "e1", "--track", "mlflow")
    return tmp


class TestExperiment:
    def test_a_parent_run_with_one_child_per_cell(self, experiment):
        """The parent is the experiment; each cell a child (mlflow.parentRunId) tagged with its axes,
        its metrics its own summary.json's."""
        runs = runs_of(client(experiment), "tracked")
        (parent,) = [r for r in runs if r.data.tags.get("loadgen.kind") == "experiment"]
        children = sorted((r for r in runs if r is not parent), key=lambda r: r.data.tags["gpu"])
        assert parent.info.run_name == "e1" and parent.info.status == "FINISHED"
        assert parent.data.params["repeats"] == "1" and parent.data.params["cells"] == "2"
        assert [c.data.tags["mlflow.parentRunId"] for c in children] == [parent.info.run_id] * 2
        assert [c.data.tags["gpu"] for c in children] == ["a100", "h100"]
        assert [c.data.tags["loadgen.cell"] for c in children] == [
            "sim--gpu=a100/repeat-1",
            "sim--gpu=h100/repeat-1",
        ]
        assert {c.data.tags["backend"] for c in children} == {"sim"}
        for c in children:
            s = summary(experiment / "e1" / c.data.tags["loadgen.cell"])
            assert c.data.metrics == facts.metrics(s)
            assert c.data.metrics["p99 ttft_ms"] == s["metrics"]["ttft_ms"]["p99"]
            assert c.data.params == facts.params(s)
        files = sorted(a.path for a in client(experiment).list_artifacts(parent.info.run_id))
        assert files == ["experiment.html", "experiment.json", "experiment.md"]
        ranked = json.loads((experiment / "e1" / "experiment.json").read_text())["ranking"]["rows"]
        for row in ranked:
            want = row["figures"]["capacity_rps"]["mean"]
            assert parent.data.metrics[facts.safe_key(f"capacity_rps/{row['config']}")] == want

    def test_resume_reuses_the_parent_and_logs_no_cell_twice(self, experiment):
        """--resume of a tracked experiment reopens the same parent (tracking.json) and adds no run."""
        before = {r.info.run_id for r in runs_of(client(experiment), "tracked")}
        proc = cli("experiment", "--resume", str(experiment / "e1"), env=env(), timeout=120)
        assert proc.returncode == 0, proc.stderr
        saved = json.loads((experiment / "e1" / "tracking.json").read_text())
        assert f"parent run {saved['parent_run_id']}" in proc.stderr
        assert {r.info.run_id for r in runs_of(client(experiment), "tracked")} == before
        assert sorted(saved["logged"]) == ["sim--gpu=a100/repeat-1", "sim--gpu=h100/repeat-1"]

    def test_no_secret_in_the_experiments_store(self, experiment):
        """The API key given to the cells is in no stored byte."""
        stored = [experiment / "mlflow.db", experiment / "e1" / "tracking.json"]
        stored += list((experiment / "mlartifacts").rglob("*"))
        assert not any(p.is_file() and KEY_SECRET.encode() in p.read_bytes() for p in stored)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_track_records_adds_the_request_records(tmp_path):
    """--track-records: requests.jsonl is an artifact too, byte for byte the run's."""
    code, err = run(tmp_path, "rec", "--no-report", "--track", "mlflow", "--track-records")
    assert code == 0, err
    c = client(tmp_path)
    (got,) = runs_of(c, "quickstart")
    assert sorted(a.path for a in c.list_artifacts(got.info.run_id)) == ["requests.jsonl", "summary.json"]
    local = Path(c.download_artifacts(got.info.run_id, "requests.jsonl", str(tmp_path / "dl")))
    assert local.read_bytes() == (tmp_path / "rec" / "requests.jsonl").read_bytes()


def test_track_records_of_a_columnar_run_logs_its_store(tmp_path):
    """A columnar run keeps its records in records.parquet (its requests.jsonl is compacted
    away when the load ends): that store is the artifact, byte for byte."""
    code, err = run(
        tmp_path, "col", "--no-report", "--records", "columnar", "--track", "mlflow", "--track-records"
    )
    assert code == 0, err
    c = client(tmp_path)
    (got,) = runs_of(c, "quickstart")
    assert sorted(a.path for a in c.list_artifacts(got.info.run_id)) == ["records.parquet", "summary.json"]
    local = Path(c.download_artifacts(got.info.run_id, "records.parquet", str(tmp_path / "dl")))
    assert local.read_bytes() == (tmp_path / "col" / "records.parquet").read_bytes()


def test_a_sweeps_stages_are_a_metric_series(tmp_path):
    """A 2-stage sweep: each stage's figures under ``stage/`` at its index as the step; the
    plain names stay the whole run's."""
    code, err = run(tmp_path, "sw", "--no-report", "--track", "mlflow", "--sweep", "concurrency=1,2")
    assert code == 0, err
    c = client(tmp_path)
    (got,) = runs_of(c, "quickstart")
    s = summary(tmp_path / "sw")
    history = c.get_metric_history(got.info.run_id, "stage/p99 ttft_ms")
    assert [(h.step, h.value) for h in sorted(history, key=lambda h: h.step)] == [
        (st["index"], st["metrics"]["ttft_ms"]["p99"]) for st in s["stages"]
    ]
    assert len(s["stages"]) == 2
    assert got.data.metrics["p99 ttft_ms"] == s["metrics"]["ttft_ms"]["p99"]


def test_a_tracker_that_is_down_costs_a_warning_not_the_results(tmp_path):
    """An MLflow server that refuses: exit 0, the run folder complete, one warning naming it."""
    port = closed_port()
    code, err = run(
        tmp_path, "down", "--no-report", "--track", "mlflow", "--track-uri", f"http://127.0.0.1:{port}"
    )
    assert code == 0, err
    assert f"loadgen: warning: tracking: MLflow at http://127.0.0.1:{port}: cannot create run down" in err
    assert summary(tmp_path / "down")["counts"]["ok"] == 6


def test_a_file_store_uri_works_where_mlflow_allows_it(tmp_path, monkeypatch):
    """A ``file:`` URI (MLflow 3: with MLFLOW_ALLOW_FILE_STORE=true) is an mlruns folder."""
    proc = cli(
        "run", "quickstart", *TINY, "--out", str(tmp_path), "--run-id", "f1", "--no-report",
        "--track", "mlflow", "--track-uri", (tmp_path / "mlruns").as_uri(),
        env={**cli_env(), "MLFLOW_ALLOW_FILE_STORE": "true"}, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's client reads it, as the CLI's did
    (got,) = runs_of(MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri()), "quickstart")
    assert got.data.metrics == facts.metrics(summary(tmp_path / "f1"))


def test_a_backend_not_installed_is_exit_2_before_any_load(tmp_path, monkeypatch, capsys):
    """--track with its library missing: exit 2 naming the extra, and no run folder."""
    from loadgen.cli.main import main
    from loadgen.tracking import base

    monkeypatch.setitem(base.BACKENDS, "wandb", "loadgen_no_such_module")
    code = main(["run", "quickstart", *TINY, "--out", str(tmp_path), "--track", "wandb"])
    assert code == 2
    assert "pip install 'loadgen[wandb]'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# --- W&B, offline ----------------------------------------------------------------------------

_BLOCK = 32768  # W&B's run file is a LevelDB log: 32 KiB blocks of (crc, length, type) records


def wandb_records(path: Path) -> Iterator:
    """The records of an offline ``run-*.wandb`` file, as W&B's own protobuf ``Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < 7:
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # FULL, FIRST start; MIDDLE, LAST go on
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record


def test_wandb_offline_run_holds_the_conditions_figures_and_files(tmp_path):
    """An offline W&B run: config = the parameters, summary = the metrics, the files copied."""
    pytest.importorskip("wandb")
    code, err = run(tmp_path, "w1", "--track", "wandb")
    assert code == 0, err
    (path,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    config: dict[str, str] = {}
    figures: dict[str, float] = {}
    runs = []
    for r in wandb_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            runs.append(r.run)
            config.update({u.key: json.loads(u.value_json) for u in r.run.config.update})
        elif kind == "config":
            config.update({u.key: json.loads(u.value_json) for u in r.config.update})
        elif kind == "summary":
            figures.update({u.key: json.loads(u.value_json) for u in r.summary.update})
    s = summary(tmp_path / "w1")
    assert runs[0].project == "quickstart" and runs[0].display_name == "w1"
    params = facts.params(s)
    assert {k: config[k] for k in params} == params
    metrics = facts.metrics(s)
    assert {k: figures[k] for k in metrics} == metrics
    files = path.parent / "files"
    assert (files / "summary.json").read_bytes() == (tmp_path / "w1" / "summary.json").read_bytes()
    assert (files / "report.html").is_file() and (files / "report.md").is_file()
    for p in path.parent.rglob("*"):
        if p.is_file():
            assert HEADER_SECRET.encode() not in p.read_bytes() and KEY_SECRET.encode() not in p.read_bytes()


def test_wandb_experiment_tracked_on_resume_is_a_group_with_its_cells(tmp_path):
    """An experiment run untracked, then ``--resume --track wandb``: both done cells are logged
    then (job_type cell, group = the experiment), with the parent (job_type experiment); a later
    ``--resume --track mlflow`` is refused (exit 2): the parent is in W&B."""
    pytest.importorskip("wandb")
    run_experiment(tmp_path, "u1")
    proc = cli("experiment", "--resume", str(tmp_path / "u1"), "--track", "wandb", env=env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "tracked 2 cells done before" in proc.stderr
    found = []
    for path in sorted(tmp_path.glob("wandb/offline-run-*/run-*.wandb")):
        (r,) = [r.run for r in wandb_records(path) if r.WhichOneof("record_type") == "run"]
        found.append((r.job_type, r.display_name, r.run_group, r.project))
    assert sorted(found) == [
        ("cell", "sim--gpu=a100--repeat-1", "u1", "tracked"),
        ("cell", "sim--gpu=h100--repeat-1", "u1", "tracked"),
        ("experiment", "u1", "u1", "tracked"),
    ]
    saved = json.loads((tmp_path / "u1" / "tracking.json").read_text())
    assert saved["backend"] == "wandb" and sorted(saved["logged"]) == [
        "sim--gpu=a100/repeat-1",
        "sim--gpu=h100/repeat-1",
    ]
    again = cli("experiment", "--resume", str(tmp_path / "u1"), "--track", "mlflow", env=env(), timeout=120)
    assert again.returncode == 2
    assert "is tracked in wandb" in again.stderr
