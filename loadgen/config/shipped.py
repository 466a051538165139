"""The profiles shipped with loadgen, found by bare name from any folder, installed or not.

The repository keeps them in its top-level ``profiles/`` folder. A wheel installs that same
folder as ``loadgen/_profiles`` (``pyproject.toml`` maps it with ``package-dir``), so an
installed loadgen finds them through ``importlib.resources`` and a checkout (or an editable
install) finds them beside the package. Either way they are real files, so a profile that
names a data file relative to itself keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from loadgen.config.loading import StrictLoader
from loadgen.errors import ConfigError

GATE_RULES = "gate"  # the default rules of `loadgen gate`, shipped beside the profiles


@dataclass(frozen=True)
class ShippedProfile:
    name: str  # the bare name `loadgen run NAME` accepts (the file name without .yaml)
    path: Path
    description: str  # the profile's ``description``, else its first comment line


def profile_dir() -> Path:
    """The folder holding the shipped profiles: the installed copy first, else the checkout's."""
    installed = resources.files("loadgen") / "_profiles"
    if isinstance(installed, Path) and installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "profiles"


def shipped_path(name: str) -> Path | None:
    """The shipped file for a bare name (``quickstart``, ``gate``), or None if there is none."""
    path = profile_dir() / f"{name}.yaml"
    return path if path.is_file() else None


def resolve_profile(arg: str) -> Path:
    """A profile argument as a path: an existing file or a ``.yaml`` path is taken as given
    (the loader reports a missing one); otherwise the shipped profile of that name.

    Raises ``ConfigError`` listing the shipped profiles when there is none of that name."""
    given = Path(arg)
    if given.exists() or given.suffix in (".yaml", ".yml"):
        return given
    found = shipped_path(arg)
    if found is None:
        names = ", ".join(p.name for p in shipped_profiles() if p.name != GATE_RULES)
        raise ConfigError(
            [f"no such file, and no shipped profile of that name; shipped: {names}"], source=arg
        )
    return found


def gate_rules_path() -> Path:
    """The shipped default rules file of ``loadgen gate``."""
    return profile_dir() / f"{GATE_RULES}.yaml"


def shipped_profiles() -> list[ShippedProfile]:
    """Every shipped YAML file, by name, with its one-line description."""
    return [ShippedProfile(p.stem, p, _describe(p)) for p in sorted(profile_dir().glob("*.yaml"))]


def _describe(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("description"), str):
        return data["description"].strip()
    for line in text.splitlines():
        if line.startswith("#") and line.lstrip("#").strip():
            return line.lstrip("#").strip()
    return ""
