"""The documentation site builds with --strict (a broken link or a missing page fails it), its
reference pages name everything the code defines, every `loadgen` command in it parses and
names a profile that exists, and the README stays a one-screen entry that links into it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen import metric_defs
from loadgen.cli import reference
from loadgen.cli.common import EXIT_CODES, resolve_profile_path
from loadgen.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
COMMAND = re.compile(r"^\s{4,}(?:\$ )?loadgen (.*)$")


def _commands(path: Path) -> list[str]:
    text = path.read_text().replace("\\\n", " ")
    return [m.group(1).split(" #")[0].strip() for line in text.splitlines() if (m := COMMAND.match(line))]


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # without -q: mkdocs prints every warning, and strict mode counts what it printed
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert warnings == [], warnings
    for page in (
        "index.html",
        "reference/cli/index.html",
        "reference/profile/index.html",
        "changelog/index.html",
    ):
        assert (tmp_path / page).exists(), page
    assert "loadgen experiment" in (tmp_path / "reference/cli/index.html").read_text()


def _models(model: type, seen: dict[str, type]) -> dict[str, type]:
    """``model`` and every config model its fields take, recursed (unions and tuples opened)."""
    from pydantic import BaseModel

    seen[model.__name__] = model
    for f in model.model_fields.values():
        stack = [f.annotation]
        while stack:
            t = stack.pop()
            stack.extend(getattr(t, "__args__", ()))
            if isinstance(t, type) and issubclass(t, BaseModel) and t.__name__ not in seen:
                _models(t, seen)
    return seen


def test_every_config_model_has_its_own_docstring():
    """The profile page's section text is each model's docstring; a model without one inherits
    pydantic's, whose links break the strict build (OutputConfig did)."""
    from loadgen.config.gate_rules import GateRules
    from loadgen.config.schema import Profile

    models = {**_models(Profile, {}), **_models(GateRules, {})}
    assert {"Profile", "OutputConfig", "WorkloadConfig", "SlaConfig", "FixedLength"} <= set(models)
    bare = sorted(
        name
        for name, m in models.items()
        for k in m.__mro__
        if k.__module__.startswith("loadgen") and not k.__dict__.get("__doc__")
    )
    assert bare == [], "config models with no docstring of their own"


def test_the_reference_names_every_command_field_metric_and_exit_code():
    cli, profile = reference.cli_page(), reference.profile_page()
    commands = {a.dest: a for a in build_parser()._actions if a.dest == "command"}["command"].choices
    assert all(f"## `loadgen {name}`" in cli for name in commands)
    assert all(f"| `{path}` |" in profile for path, *_ in reference.field_rows())
    assert {"target.reset_path", "workload.seed", "load.concurrency", "sla.ttft_ms"} <= {
        path for path, *_ in reference.field_rows()
    }
    undescribed = [path for path, _t, _d, said in reference.field_rows() if not said]
    undescribed += [
        f"{kind}.{path}"
        for kind, rows in reference.variant_rows().items()
        for path, *_, said in rows
        if not said
    ]
    assert undescribed == [], "profile fields with no comment in their config model"
    metrics = reference.metrics_page()
    assert all(f"| `{m.name}` |" in metrics for m in metric_defs.METRICS)
    codes = reference.exit_codes_page()
    assert all(f"| {code} |" in codes for code in EXIT_CODES)
    assert "`conditions.client.metric_definitions.changed_in`" in reference.file_page("summary")()
    assert "`proposal.twin.params`" in reference.file_page("capacity")()
    assert (
        "`ranking.rows`" in reference.file_page("experiment")()
        and "`cells`" in reference.file_page("experiment")()
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_command_in_the_docs_parses_and_names_a_profile_that_exists(page):
    for command in _commands(page):
        try:
            args = build_parser().parse_args(shlex.split(command))
        except SystemExit:
            pytest.fail(f"{page.name}: `loadgen {command}` does not parse")
        profile = getattr(args, "profile", None)
        if profile and "…" not in profile:
            found = resolve_profile_path(profile)
            assert found is not None and found.exists(), f"{page.name}: `loadgen {command}`: no {profile}"


def test_the_changelog_has_the_entry_summaries_link_to():
    heading = f"### Metric definitions {metric_defs.DEFINITIONS_CHANGED}"
    assert heading in (ROOT / "CHANGELOG.md").read_text()


def test_the_readme_is_one_screen_that_links_into_the_site():
    """Under 200 lines; every relative link resolves; every command parses; the two commands."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    links = [m.group(1) for m in re.finditer(r"\]\(([^)#]+)", text) if not m.group(1).startswith("http")]
    assert links and [link for link in links if not (ROOT / link).exists()] == []
    for command in _commands(ROOT / "README.md"):
        build_parser().parse_args(shlex.split(command))
    assert "pip install -e . && loadgen run profiles/quickstart.yaml" in text
    assert "pip install -e '.[test]' && python -m pytest -q -n 2" in text
