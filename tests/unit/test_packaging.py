"""Shipped profiles travel with the package: by bare name from any folder, in a checkout and
in an installed wheel (``profiles/`` installs as ``loadgen/_profiles``; see pyproject.toml)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.cli.main import main
from loadgen.config import load_profile, shipped
from loadgen.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
# What a wheel build needs from the checkout; the rest (caches, reports, .git) stays behind.
_NOT_BUILT = shutil.ignore_patterns(
    ".git", ".*_cache", "__pycache__", "*.egg-info", "build", "dist", "reports", ".venv", "venv", "tests"
)


def test_profiles_command_lists_every_shipped_file(capsys):
    """`loadgen profiles` prints one line per file in profiles/, its name then its description."""
    assert main(["profiles"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(p.stem for p in PROFILES.glob("*.yaml"))
    quickstart = next(line for line in lines if line.startswith("quickstart "))
    assert quickstart.split(None, 1)[1] == load_profile(PROFILES / "quickstart.yaml").description
    gate = next(line for line in lines if line.startswith("gate "))  # no description: its first comment
    assert gate.split(None, 1)[1].startswith("Default CI gate:")


def test_bare_name_resolves_to_the_shipped_profile_from_any_folder(tmp_path, monkeypatch):
    """`quickstart` means the shipped file wherever the command runs; a path is taken as given."""
    monkeypatch.chdir(tmp_path)
    assert shipped.resolve_profile("quickstart") == PROFILES / "quickstart.yaml"
    assert load_profile(shipped.resolve_profile("quickstart")).name == "quickstart"
    assert shipped.resolve_profile("mine.yaml") == Path("mine.yaml")  # a path: the loader reports it missing
    listed = "no shipped profile of that name; shipped: agentic, chat, ci-smoke"
    with pytest.raises(ConfigError, match=listed):
        shipped.resolve_profile("chatt")
    (tmp_path / "quickstart").write_text("name: local\n")  # an existing file wins over the shipped name
    assert shipped.resolve_profile("quickstart") == Path("quickstart")
    assert shipped.gate_rules_path() == PROFILES / "gate.yaml"


def test_a_shipped_profile_reads_its_data_files_relative_to_itself(tmp_path, monkeypatch):
    """A shipped profile that names a data file beside it loads from any working folder."""
    folder = tmp_path / "shipped"
    folder.mkdir()
    (folder / "lengths.txt").write_text("10 20 30\n")
    (folder / "traced.yaml").write_text(
        "name: traced\nload: {concurrency: 1}\nworkload:\n  num_requests: 1\n"
        "  input_tokens: {kind: empirical, file: lengths.txt}\n"
    )
    monkeypatch.setattr(shipped, "profile_dir", lambda: folder)
    monkeypatch.chdir(tmp_path)
    profile = load_profile(shipped.resolve_profile("traced"))
    assert profile.workload.input_tokens.data == (10, 20, 30)


def test_every_package_is_listed_for_the_wheel():
    """pyproject.toml lists packages by hand (one is mapped), so a new subpackage must be added."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "loadgen").rglob("__init__.py")}
    assert listed == on_disk | {"loadgen._profiles", "loadgen._experiments", "loadgen.data", "loadgen.traces"}


def _run(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> str:
    """Run a command to completion (bounded), failing the test with its stderr; its stdout."""
    res = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, f"{' '.join(map(str, args))}\n{res.stderr}"
    return res.stdout


def _venv_with_current_dependencies(root: Path) -> Path:
    """A fresh venv that sees this environment's packages (not its loadgen) after its own."""
    _run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", root)
    python = root / "bin" / "python"
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip()
    # --system-site-packages reaches the base interpreter's, not this venv's: add ours by path
    # (a plain path line runs no .pth of ours, so an editable loadgen's finder stays out).
    ours = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    Path(purelib, "_parent_env.pth").write_text("".join(f"{p}\n" for p in ours))
    return python


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_installed_wheel_runs_a_shipped_profile_from_an_empty_folder(tmp_path):
    """Built and installed as a wheel, `loadgen run quickstart` works in an empty folder."""
    src, wheels, empty, venv = (tmp_path / d for d in ("src", "wheels", "empty", "venv"))
    # setuptools builds in-tree: a copy keeps build/ (and stale files in it) out of the checkout.
    shutil.copytree(REPO, src, ignore=_NOT_BUILT)
    empty.mkdir()
    build = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, src]
    _run(sys.executable, "-m", "pip", *build)
    [wheel] = wheels.glob("loadgen-*.whl")
    python = _venv_with_current_dependencies(venv)
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    where = "import loadgen, loadgen.config.shipped as s; print(loadgen.__file__); print(s.profile_dir())"
    module, profiles = _run(python, "-c", where, cwd=empty, env=env).splitlines()
    assert Path(module).is_relative_to(venv), module  # the installed copy, not the checkout
    assert Path(profiles).is_relative_to(venv) and Path(profiles).name == "_profiles"
    assert sorted(p.name for p in Path(profiles).iterdir()) == sorted(p.name for p in PROFILES.iterdir())

    flags = ["--no-progress", "--no-report", "--num-requests", "4", "--warmup", "0", "--output-tokens", "16"]
    _run(venv / "bin" / "loadgen", "run", "quickstart", *flags, "--run-id", "wheel", cwd=empty, env=env)
    run_dir = empty / "reports" / "wheel"
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert [r["ok"] for r in records] == [True] * 4
    assert summary["counts"]["ok"] == 4
    assert summary["conditions"]["profile"]["name"] == "quickstart"
    # report.html's chart library and scripts ship as package data: its interactive section renders.
    _run(venv / "bin" / "loadgen", "report", run_dir, cwd=empty, env=env)
    page = (run_dir / "report.html").read_text()
    assert 'id="lg-data"' in page and "/*! https://github.com/leeoniya/uPlot" in page and "lgTimeline" in page
    # The sample data ship beside the profiles: a profile naming ../data or ../traces runs too.
    for name in ("sharegpt", "replay"):
        extra = ["--set", "workload.trace.window_s=2"] if name == "replay" else []
        _run(venv / "bin" / "loadgen", "run", name, *flags, *extra, "--run-id", name, cwd=empty, env=env)
        assert json.loads((empty / "reports" / name / "summary.json").read_text())["counts"]["failed"] == 0
    # The shipped experiments too, by bare name, with their workload beside them.
    plan = _run(venv / "bin" / "loadgen", "experiment", "levers", "--dry-run", cwd=empty, env=env)
    assert "24 cells" in plan and "sim gpu=a100 precision=fp16 max_num_seqs=64" in plan
