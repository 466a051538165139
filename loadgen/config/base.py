"""The base every configuration model shares: unknown keys are errors, models are frozen.

A typo in a benchmark profile silently falling back to a default produces a number measured
under conditions nobody asked for, so every section rejects what it does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

# No NaN or infinity anywhere: `duration_s: inf` or `rate: .nan` cannot run and must say so.
STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class StrictModel(BaseModel):
    """Every config model's base: an unknown key is an error (a typo must not be ignored), a
    validated profile cannot change under the run, and no number is NaN or infinite."""

    model_config = STRICT


def field_msg(field: str, msg: str) -> ValueError:
    """A model-level check about one field: "@field: msg" lets the renderer put it on that path."""
    return ValueError(f"@{field}: {msg}")


def _no_bool(v: object) -> object:
    # pydantic's lax mode reads `true` as 1: `concurrency: true` must be an error, not c=1.
    if isinstance(v, bool):
        raise ValueError(f"expected an integer, got {str(v).lower()}")
    return v


# An integer that refuses booleans.
Int = Annotated[int, BeforeValidator(_no_bool)]

# The open-loop arrival processes, the one list (workload/arrivals.py draws them): Poisson, evenly
# spaced, gamma gaps of a given burstiness.
Arrival = Literal["poisson", "constant", "gamma"]


def _scalars_to_str(v: object) -> object:
    # `labels: {tp: 2}` should mean the label "2", not a type error.
    if isinstance(v, Mapping):
        return {
            k: str(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x for k, x in v.items()
        }
    return v


StrDict = Annotated[dict[str, str], BeforeValidator(_scalars_to_str)]


def existing_file(v: str | None, what: str) -> str | None:
    """``v`` if it names a file (or is None); else an error that says which file is wanted."""
    if v is not None and not Path(v).is_file():
        raise ValueError(f"no such file: {v!r} (give {what})")
    return v
