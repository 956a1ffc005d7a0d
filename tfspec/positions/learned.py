"""Learned absolute positions: a trained table added to the embeddings (Table 3 row E)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tfspec.positions import PositionKind, register
from tfspec.spec.bounds import MAX_POSITIONS


@register
class Learned(PositionKind):
    name, order, summary = "learned", 1, "a trained table (Table 3 row E)"
    embedded = True
    reads_cache_indices = False  # each row's own position ids

    fields = {
        "offset": (Annotated[int, Field(ge=0, le=MAX_POSITIONS)], Field(0, description=(
            "learned and sinusoidal: rows of the table before the first position's; position p reads\n"
            "row p + offset (BART's learned table starts with 2 unused rows, a leftover of fairseq's\n"
            "padding positions; M2M-100's sinusoids are read from row pad_token_id + 1)."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def embedding_params(cls, positional, width: int) -> dict:
        return {"weight": ((positional.rows, width), "normal:0.02")}
