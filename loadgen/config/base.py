"""The base every configuration model shares: unknown keys are errors, models are frozen.

A typo in a benchmark profile silently falling back to a default produces a number measured
under conditions nobody asked for, so every section rejects what it does not know.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# No NaN or infinity anywhere: `duration_s: inf` or `rate: .nan` cannot run and must say so.
STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class StrictModel(BaseModel):
    model_config = STRICT


def field_msg(field: str, msg: str) -> ValueError:
    """A model-level check about one field: "@field: msg" lets the renderer put it on that path."""
    return ValueError(f"@{field}: {msg}")
