"""T5's relative attention bias (Raffel et al. 2020, §2.1): a learned scalar per head and
bucket of the distance j - i added to self-attention's logits, one table per stack (buckets and
the table: ``tfspec.layers.relative_bias``; the backends' score terms ``backends/{torch,onnx}/
scores/relative_bias.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from tfspec.positions import PositionKind, register
from tfspec.spec.base import field_error
from tfspec.spec.bounds import MAX_BUCKETS


@register
class RelativeBias(PositionKind):
    name, order = "relative_bias", 4
    summary = ("a learned scalar per head and bucket of the distance j - i added to self-attention's logits, one "
               "table per stack (T5, Raffel et al. 2020, §2.1; ``tfspec.layers.relative_bias``)")
    in_attention = per_stack = layers_share = True

    fields = {
        "tables": (Literal["stack", "layer"], Field("stack", description=(
            "relative_bias: one (buckets, heads) table per stack, held by its first layer (T5, mT5),\n"
            "or one per self-attention layer (umT5)."))),
        "buckets": (Annotated[int, Field(ge=4, le=MAX_BUCKETS)], Field(32, description=(
            "relative_bias: buckets of distances (T5's relative_attention_num_buckets): half exact\n"
            "distances, half log-spaced up to max_distance; bidirectional attention gives each sign half.\n"
            "disentangled: buckets per sign of the distance i - j (DeBERTa's position_buckets, 256): the\n"
            "table has 2 x buckets rows, distances below buckets / 2 exact, the others log-spaced up to\n"
            "max_distance (DeBERTa's max_relative_positions, 512)."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def check(cls, positional) -> None:
        if positional.max_distance <= positional.buckets // 2:
            raise field_error("max_distance", f"max_distance ({positional.max_distance}) must exceed buckets // 2 "
                              f"({positional.buckets // 2}), the exact distances: the other buckets are log-spaced "
                              "between the two; raise max_distance or lower buckets")

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        from tfspec.layers.relative_bias import table_param  # tfspec.layers imports the spec, which imports this

        return table_param(b, name, layer.positions, layer.heads)
