"""DeBERTa's disentangled attention (He et al. 2021, §3.1): a stack's table of 2 x buckets
relative-position embeddings projected by each layer's own query and key weights, its
content-to-position and position-to-content products added to the logits (the table and the
layer checks: ``tfspec.layers.disentangled``; the backends' score terms ``backends/{torch,onnx}/
scores/disentangled.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tfspec.positions import PositionKind, register
from tfspec.spec.base import field_error
from tfspec.spec.bounds import MAX_BUCKETS


@register
class Disentangled(PositionKind):
    name, order = "disentangled", 6
    summary = ("DeBERTa's disentangled attention (He et al. 2021, §3.1), a stack's table of 2 x buckets "
               "relative-position embeddings projected by each layer's own query and key weights, its "
               "content-to-position and position-to-content products added to the logits "
               "(``tfspec.layers.disentangled``)")
    in_attention = per_stack = True
    reads = ("buckets",)

    fields = {
        "terms": (tuple[Literal["c2p", "p2c"], ...], Field(("c2p", "p2c"), min_length=1, max_length=2, description=(
            "disentangled: the products added to the content-to-content score q_i·k_j: c2p, query\n"
            "content x key position (q_i·P^K_δ(i,j)); p2c, query position x key content (k_j·P^Q_δ(i,j)).\n"
            "DeBERTa-v2 and v3 add both (pos_att_type [p2c, c2p])."))),
        "table_norm": (bool, Field(False, description=(
            "disentangled: the spec's norm on the relative table before the projections (DeBERTa-v3's\n"
            "norm_rel_ebd: layer_norm)."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def check(cls, positional) -> None:
        if len(set(positional.terms)) < len(positional.terms):
            raise field_error("terms", f"terms lists {list(positional.terms)}: name each of c2p and p2c at most once")
        if not positional.buckets // 2 + 1 < positional.max_distance <= MAX_BUCKETS:
            raise field_error("max_distance", f"max_distance ({positional.max_distance}) must exceed buckets // 2 + 1 "
                              f"({positional.buckets // 2 + 1}), where the log-spaced buckets start, and be at most "
                              f"{MAX_BUCKETS:,}; raise max_distance or lower buckets")

    @classmethod
    def layer_problem(cls, layer) -> str | None:
        from tfspec.layers import disentangled  # tfspec.layers imports the spec, which imports this

        return disentangled.check(layer)

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        from tfspec.layers import disentangled

        return disentangled.table_params(b, name, layer.positions)
