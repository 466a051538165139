"""Length distributions a profile can ask for (input and output tokens).

A bare integer is a fixed length; every other kind is a mapping with ``kind``. Models reject
unknown keys (see ``schema.py``) and check their bounds here, once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, model_validator

from loadgen.config.base import Int, StrictModel, field_msg

# The longest length any distribution may produce (4 Mi tokens, beyond every served context):
# past it a prompt cannot be built in memory and a max_tokens overflows the server's integers.
MAX_TOKENS = 1 << 22
Tokens = Annotated[Int, Field(ge=1, le=MAX_TOKENS)]


class FixedLength(StrictModel):
    """Every request gets the same length (what a bare integer in a profile means)."""

    kind: Literal["fixed"] = "fixed"
    # The length, in tokens (a bare integer in a profile means this).
    value: Tokens


class UniformLength(StrictModel):
    """Lengths drawn uniformly between ``min`` and ``max`` tokens, both included."""

    kind: Literal["uniform"] = "uniform"
    # Shortest length, in tokens.
    min: Tokens
    # Longest length, in tokens.
    max: Tokens

    @model_validator(mode="after")
    def _ordered(self):
        if self.max < self.min:
            raise field_msg("max", f"must be >= min ({self.min}), got {self.max}")
        return self


class _Clipped(StrictModel):
    """The bounds a continuous distribution's draws are clipped to, so that no request asks for
    zero tokens or more than the model's context."""

    # Draws below it are clipped to it.
    min: Tokens = 1
    max: Tokens | None = None  # None: clipped at MAX_TOKENS

    @model_validator(mode="after")
    def _ordered(self):
        if self.max is not None and self.max < self.min:
            raise field_msg("max", f"must be >= min ({self.min}), got {self.max}")
        return self


class NormalLength(_Clipped):
    """Normal, clipped to [min, max]: clipping piles mass on the bounds, which is intended."""

    kind: Literal["normal"] = "normal"
    # Mean length, in tokens.
    mean: float = Field(le=MAX_TOKENS)
    # Standard deviation, in tokens.
    std: float = Field(ge=0, le=MAX_TOKENS)


class LognormalLength(_Clipped):
    """Lognormal given by its mean in tokens (not the log-space mu) and log-space sigma."""

    kind: Literal["lognormal"] = "lognormal"
    # Median length in tokens (the distribution's e^mu).
    mean: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(gt=0, le=10)  # e**(10**2) is already far past any length


class EmpiricalLength(StrictModel):
    """Resample observed lengths with replacement, given inline or as a file (ints or JSON)."""

    kind: Literal["empirical"] = "empirical"
    # Lengths drawn from with equal weight.
    values: tuple[Tokens, ...] | None = None
    # A file of lengths (one integer per line), drawn from with equal weight.
    file: str | None = None
    _loaded: tuple[int, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _one_source(self):
        if (self.values is None) == (self.file is None):
            raise ValueError("give exactly one of values (a list of ints) or file (a path)")
        if self.values is not None and not self.values:
            raise field_msg("values", "must not be empty")
        if self.file is not None:
            self._loaded = _read_lengths(self.file)
        return self

    @property
    def data(self) -> tuple[int, ...]:
        """The population to resample: the inline values or the file's contents."""
        return self.values if self.values is not None else self._loaded


def _read_lengths(file: str) -> tuple[int, ...]:
    try:
        text = Path(file).read_text()
    except OSError as exc:
        raise field_msg("file", f"cannot read {file!r}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text) if text.lstrip().startswith("[") else text.split()
        values = tuple(int(v) for v in raw)
    except (ValueError, TypeError):
        raise field_msg("file", f"{file!r}: expected one int per line or a JSON list") from None
    if not values or min(values) < 1 or max(values) > MAX_TOKENS:
        raise field_msg("file", f"{file!r}: needs at least one value, all >= 1 and <= {MAX_TOKENS}")
    return values


def _bare_int_is_fixed(v: object) -> object:
    # `input_tokens: 512` is the common case and reads better than a one-key mapping.
    if isinstance(v, int) and not isinstance(v, bool):
        return {"kind": "fixed", "value": v}
    return v


LengthDist = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength | EmpiricalLength,
    Field(discriminator="kind"),
    BeforeValidator(_bare_int_is_fixed),
]
