"""MkDocs hook: the reference pages, rendered from the code at every build (loadgen/cli/reference.py),
and the repository's CHANGELOG.md as the site's changelog page."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

from loadgen.cli.reference import PAGES

ROOT = Path(__file__).resolve().parents[2]


def on_files(files: Files, config) -> Files:
    for path, render in PAGES.items():
        files.append(File.generated(config, path, content=render()))
    changelog = (ROOT / "CHANGELOG.md").read_text().replace("](docs/", "](")  # the site's root is docs/
    files.append(File.generated(config, "changelog.md", content=changelog))
    return files
