"""Relative position representations (Shaw et al. 2018): learned embeddings of the clipped
distance j - i added to keys and values inside self-attention (the backends' stages
``backends/{torch,onnx}/positions/relative.py``)."""

from __future__ import annotations

from tfspec.positions import PositionKind, register


@register
class Relative(PositionKind):
    name, order = "relative", 3
    summary = ("learned embeddings of the clipped distance j - i added to keys and values inside self-attention "
               "(Shaw et al. 2018)")
    in_attention = True

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        """One table of clipped distances for keys and one for values, shared by the heads."""
        rows, d_k, d_v = 2 * layer.positions.max_distance + 1, layer.d_k, layer.d_v
        return {"rel_k": ((rows, d_k), f"normal:{d_k ** -0.5}"), "rel_v": ((rows, d_v), f"normal:{d_v ** -0.5}")}

    @classmethod
    def attention_flops(cls, s, positions: dict) -> dict:
        """q·a_K for each query and clipped distance, then the weights bucketed by distance x a_V."""
        return {"relative": 2 * s.n * s.h * (2 * positions["max_distance"] + 1) * (s.d_k + s.d_v)}
