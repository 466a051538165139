"""The command line: the only part of loadgen that prints or exits (``main.py`` parses and
dispatches, ``console.py`` renders)."""

from loadgen.cli.main import main

__all__ = ["main"]
