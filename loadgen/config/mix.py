"""A LoRA mix: the model names (a base and its adapters) a run's requests ask for.

One server commonly serves a base model and many adapters; how it behaves depends on the mix
(an adapter that is not resident must be loaded before its prompt runs). ``workload.models``
names them; each request asks for one, drawn from the seed (``weighted``) or in turn
(``round_robin``), so two runs of a profile ask for the same sequence.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from loadgen.config.base import StrictModel, field_msg

MAX_MODELS = 1000


class ModelShare(StrictModel):
    """One model name a request may ask for, and its share of the requests (``weighted``)."""

    # A model or adapter name the server serves.
    name: str = Field(min_length=1, max_length=500)
    # Its share of requests (weights are normalised).
    weight: float = Field(1.0, gt=0, le=1e9)


class ModelMix(StrictModel):
    """``choice: weighted`` draws request i's model with probability weight / sum of weights;
    ``round_robin`` asks for the names in order (request i: ``mix[i % len(mix)]``), which
    cycles adapters deterministically, the worst case for a server holding few of them."""

    # weighted: each request draws a model by weight; round_robin: in turn.
    choice: Literal["weighted", "round_robin"] = "weighted"
    # The models and their weights.
    mix: tuple[ModelShare, ...] = Field(min_length=1, max_length=MAX_MODELS)

    @model_validator(mode="after")
    def _names_unique(self):
        names = [m.name for m in self.mix]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise field_msg("mix", f"names must be unique; repeated: {', '.join(dup)}")
        if self.choice == "round_robin" and any(m.weight != 1.0 for m in self.mix):
            raise field_msg("mix", "weights apply to choice: weighted; round_robin takes each name in turn")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.mix)


def _shorthand(v: object) -> object:
    """``models: [a, {name: b, weight: 3}]`` is ``{choice: weighted, mix: [...]}``; a bare name
    is a share of weight 1."""
    if isinstance(v, str):
        v = [v]
    if isinstance(v, (list, tuple)):
        v = {"mix": v}
    if isinstance(v, dict) and isinstance(v.get("mix"), (list, tuple)):
        v = {**v, "mix": [{"name": m} if isinstance(m, str) else m for m in v["mix"]]}
    return v


ModelMixField = Annotated[ModelMix, BeforeValidator(_shorthand)]
