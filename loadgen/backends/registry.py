"""The one list of wire protocols: ``target.endpoint`` name -> its ``StreamingBackend`` subclass.

Adapters register themselves with the ``register`` class decorator when their module is
imported; importing ``loadgen.backends`` imports them all. Everything that offers or checks a
choice of protocol asks here: the profile's ``target.endpoint`` (and which endpoints take token
ids), the CLI's ``--endpoint`` choices and help, which endpoints can fit prompts with the
server's ``/tokenize``, the runner, and the report's rows of what the server said.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from loadgen.backends.base import StreamingBackend

PROTOCOLS: dict[str, type[StreamingBackend]] = {}  # in registration order: the order choices are listed

B = TypeVar("B", bound=type[StreamingBackend])


def register(cls: B) -> B:
    """Class decorator: make ``cls`` the backend of ``target.endpoint: <cls.name>``."""
    name = cls.name
    if not name or not cls.PATH or getattr(cls, "STREAM", None) is None:
        raise TypeError(f"{cls.__qualname__} must set name, PATH and STREAM to be registered")
    other = PROTOCOLS.get(name)
    if other is not None and other is not cls:
        raise ValueError(f"protocol {name!r} is already registered by {other.__qualname__}")
    PROTOCOLS[name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove protocol ``name`` (tests that register a protocol of their own)."""
    PROTOCOLS.pop(name, None)


@contextmanager
def registered(cls: type[StreamingBackend]) -> Iterator[type[StreamingBackend]]:
    """``cls`` registered for the duration of the block, then removed again."""
    register(cls)
    try:
        yield cls
    finally:
        unregister(cls.name)


def names(where: Callable[[type[StreamingBackend]], bool] | None = None) -> tuple[str, ...]:
    """Every registered protocol's name (those ``where`` accepts), in registration order."""
    return tuple(n for n, cls in PROTOCOLS.items() if where is None or where(cls))


def get(name: str) -> type[StreamingBackend] | None:
    return PROTOCOLS.get(name)


def backend(name: str) -> type[StreamingBackend]:
    """The backend of protocol ``name``; KeyError naming the valid ones when there is none."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise KeyError(f"no protocol {name!r}; registered: {', '.join(PROTOCOLS)}") from None
