"""The package root's public names are pinned: a name added to or dropped from ``loadgen.__all__``
is a change to the public API and must be made here too; each resolves, and the version is
pyproject.toml's."""

from __future__ import annotations

import re
from pathlib import Path

import loadgen
from loadgen.version import __version__

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = [
    "ConfigError",
    "LoadgenError",
    "RequestRecord",
    "RunResult",
    "__version__",
    "compare",
    "gate",
    "load_run",
    "load_summary",
    "run",
    "run_async",
]


def test_the_public_names_are_pinned_and_resolve():
    assert loadgen.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(loadgen, name) is not None, name


def test_the_version_is_pyprojects_and_comes_from_a_leaf():
    said = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert said is not None and said.group(1) == __version__ == loadgen.__version__


def test_any_stays_under_2_percent_of_the_packages_lines():
    """The types carry the design: lines that name ``typing.Any`` (comments aside) stay under
    2 % of loadgen's lines, as issue 38 set it; a JSON body that is truly free-form keeps its
    ``dict[str, Any]``, the rest name their types."""
    import re
    from pathlib import Path

    import loadgen

    root = Path(loadgen.__file__).parent
    total = with_any = 0
    for path in root.rglob("*.py"):
        lines = path.read_text().splitlines()
        total += len(lines)
        with_any += sum(
            1 for line in lines if re.search(r"\bAny\b", line) and not line.lstrip().startswith("#")
        )
    assert with_any / total < 0.02, f"{with_any} of {total} lines name Any ({with_any / total:.2%})"
