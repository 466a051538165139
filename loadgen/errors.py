"""Every error loadgen raises on purpose, under one base the CLI catches once (exit code 2).

A leaf: anything may import it, it imports nothing of loadgen. ``ConfigError`` carries a list
of problems, each one line naming the field and the fix, and where they came from (a profile
path, a rules file, a flag), so a profile, gate rules and simulator settings all fail alike.

The kinds defined elsewhere, beside the code that raises them (each a subclass of one here, so
the CLI's one ``except LoadgenError`` covers it):

- ``ConfigError`` kinds: none (a rules file or simulator settings raise ``ConfigError`` itself).
- ``LoadgenError, ValueError`` kinds, bad input that is not a profile field:
  ``runner.capacity.CapacityError`` (a capacity search that cannot run),
  ``analysis.cost.CostError`` (prices that cannot be used), ``workload.datasets.DatasetError``
  (a dataset file that cannot be read), ``workload.trace_files.TraceError`` (a trace file that
  cannot be replayed), ``workload.chat_template.ChatTemplateError`` (a tokenizer folder's chat
  template that cannot be read, compiled or rendered), ``backends.bodies.BodyError`` (a request
  body template that does not compile or render JSON, a recorded body file that cannot be read).
- ``LoadgenError, ImportError`` kinds: ``workload.prompts.MissingExtra`` (a setting needs an
  optional package that is not installed; the message names the extra).
- ``LoadgenError`` kinds: ``report.ReportError`` (a report that cannot be written).
- ``RunError`` kinds: ``backends.base.ProbeError`` (the server cannot be benchmarked as configured),
  ``server.context.ContextOverflow`` (requests past the server's context, refused before the run).
"""

from __future__ import annotations


class LoadgenError(Exception):
    """Something the user can fix: bad input, an unreachable target, an unreadable run."""


class ConfigError(LoadgenError, ValueError):
    """Invalid configuration: ``problems`` read like ``load.arrival: 'possion' is not one of ...``."""

    def __init__(self, problems: list[str] | str, source: str | None = None, what: str = "profile") -> None:
        raw = [problems] if isinstance(problems, str) else list(problems)
        # One problem, one printable line: a key or value holding CR, LF or other control
        # characters is shown escaped, so it can neither break nor forge the message.
        self.problems = [_printable(p) for p in raw]
        self.source = source
        self.what = what
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"{self.source}: invalid {self.what}" if self.source else f"invalid {self.what}"
        return head + "".join(f"\n  - {p}" for p in self.problems)


class RunError(LoadgenError):
    """The run could not start: the target is unreachable, has no model, or the setup is wrong."""


class Interrupted(LoadgenError):
    """Stopped (Ctrl-C, SIGTERM) before the load began: nothing was measured, so there is no
    summary to write; the CLI exits 130 with this message, not 2 (nothing was wrong)."""


class ResultError(LoadgenError):
    """A saved run that cannot be read: missing files, or a schema this version does not know."""


def _printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
