"""Subcommands that take over some of ``run``'s flags (``capacity``, ``selfcheck``).

They define those flags as ``run`` does (type, metavar, help, choices; a switch as a switch),
and leave every other flag of ``run`` unset in their namespace, so that ``parser.overrides``
reads it as it reads run's. A leaf of the CLI layer: argparse only.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from typing import Any


def borrow(parser: argparse.ArgumentParser, run: argparse.ArgumentParser, flags: Collection[str]) -> None:
    """Add ``run``'s options named in ``flags`` to ``parser``, then ``--set``."""
    for action in (x for x in run._actions if set(x.option_strings) & set(flags)):
        if action.nargs == 0:  # a switch (--no-progress): its constant, not a value
            parser.add_argument(
                action.option_strings[-1],
                action="store_const",
                const=action.const,
                default=action.default,
                dest=action.dest,
                help=action.help,
            )
            continue
        same: dict[str, Any] = {k: getattr(action, k) for k in ("type", "metavar", "help", "choices")}
        parser.add_argument(action.option_strings[-1], **same)
    parser.add_argument(
        "--set", action="append", default=[], metavar="PATH=VALUE", help="override any profile field"
    )


def leave_unset(parser: argparse.ArgumentParser, run: argparse.ArgumentParser) -> None:
    """Every flag of ``run`` that ``parser`` lacks is None in its namespace. Call it last."""
    mine = {x.dest for x in parser._actions}
    parser.set_defaults(**{x.dest: None for x in run._actions if x.dest not in mine})
