"""Dynamic position bias (Wang et al. 2021, CrossFormer, §3.3): each head's logit of query i and
key j plus a bias a small MLP computes from the distance i - j, so the bias is learned as a
function and reaches distances no table holds (x-transformers' ``dynamic_pos_bias``). The MLP
is the paper's: ``mlp_depth`` hidden Linear layers of ``mlp_width`` (d_model / 4), each followed
by a LayerNorm and a ReLU, then a Linear to one value per head; ``log_distance`` feeds it
sign(i - j) log(1 + |i - j|) instead (Swin V2's log-spaced coordinates, Liu et al. 2022, eq. 4).
Each attention layer has its own MLP, as CrossFormer's blocks do (x-transformers shares one per
stack). Per call it runs over the 2n - 1 distances, not the n^2 pairs (the backends' score terms
``backends/{torch,onnx}/scores/distance_mlp.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

import sympy
from pydantic import Field

from tfspec.positions import PositionKind, register

NORM_EPS = 1e-5
"""The hidden layers' LayerNorm epsilon (torch's ``nn.LayerNorm`` default, as CrossFormer uses)."""


def roles(depth: int, norm: bool) -> list[str]:
    """The MLP's parameter roles in order: per hidden layer k ``dpb_w{k}``, ``dpb_b{k}`` (and the
    norm's ``dpb_g{k}``, ``dpb_s{k}``), then ``dpb_w_out``, ``dpb_b_out``."""
    hidden = [f"dpb_{p}{k}" for k in range(depth) for p in ("w", "b") + (("g", "s") if norm else ())]
    return hidden + ["dpb_w_out", "dpb_b_out"]


def width(positions, d_model: int) -> int:
    """The hidden width: ``mlp_width``, else d_model // 4 (CrossFormer's D/4)."""
    chosen = positions["mlp_width"] if isinstance(positions, dict) else positions.mlp_width
    return chosen if chosen is not None else max(d_model // 4, 1)


@register
class DistanceMlp(PositionKind):
    name, order = "distance_mlp", 9
    summary = ("each head's logits plus an MLP of the distance i - j, one per layer (dynamic position bias, "
               "Wang et al. 2021, CrossFormer)")
    in_attention = True

    fields = {
        "mlp_width": (Annotated[int, Field(ge=1, le=1 << 16)] | None, Field(None, description=(
            "distance_mlp: the hidden width of the distance MLP; None: d_model // 4 (CrossFormer's D/4,\n"
            "x-transformers' dim // 4)."))),
        "mlp_depth": (Annotated[int, Field(ge=1, le=16)], Field(3, description=(
            "distance_mlp: hidden Linear layers before the output one (CrossFormer: 3; x-transformers'\n"
            "dynamic_pos_bias_mlp_depth: 2)."))),
        "mlp_norm": (bool, Field(True, description=(
            "distance_mlp: a LayerNorm (gain and shift) after each hidden Linear, as CrossFormer's;\n"
            "False: none (x-transformers' default)."))),
        "mlp_activation": (Literal["relu", "silu"], Field("relu", description=(
            "distance_mlp: the hidden layers' activation: relu (CrossFormer) or silu (x-transformers)."))),
        "log_distance": (bool, Field(False, description=(
            "distance_mlp: the MLP reads sign(i - j) log(1 + |i - j|) (Swin V2's log-spaced\n"
            "coordinates; x-transformers' dynamic_pos_bias_log_distance); False: i - j itself."))),
    }

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        """The layer's own MLP: (w, 1), then (w, w) per further hidden layer, then (h, w)."""
        p, h = layer.positions, layer.heads
        w = width(p, b.spec.d_model)
        params = {}
        for k in range(p.mlp_depth):
            params |= {f"dpb_w{k}": ((w, 1 if k == 0 else w), "xavier_uniform"), f"dpb_b{k}": ((w,), "zeros")}
            if p.mlp_norm:
                params |= {f"dpb_g{k}": ((w,), "ones"), f"dpb_s{k}": ((w,), "zeros")}
        return params | {"dpb_w_out": ((h, w), "xavier_uniform"), "dpb_b_out": ((h,), "zeros")}

    @classmethod
    def attention_flops(cls, s, positions: dict) -> dict:
        """The MLP's products over the 2n - 1 distances of a call: w, (depth - 1) w^2 and w h
        multiply-adds each (w = mlp_width or floor(d / 4))."""
        w = positions["mlp_width"] or sympy.floor(s.d / 4)
        per_distance = w + (positions["mlp_depth"] - 1) * w * w + w * s.h
        return {"distance_mlp": 2 * (2 * s.n - 1) * per_distance}

    @classmethod
    def saved_by_layer(cls, graph, node, queries: int, keys: int) -> int:
        """What the backward of the layer's MLP keeps, per call (float32; measured against
        autograd): the (D, 1) distances, per hidden layer the Linear's output (and with the
        norm its mean and reciprocal deviation (D,) and output), the activation's output (ReLU)
        or input (SiLU) and the next Linear's input; then the (queries, keys) int64 index that
        gathers the bias from the D = queries + keys - 1 distances."""
        p = node.attrs["positions"]
        w = graph.params[node.params["dpb_w0"]].shape[0]
        distances = queries + keys - 1
        per_hidden = w * (1 + (p["mlp_activation"] == "silu")) + (w + 2 if p["mlp_norm"] else 0)
        return 4 * distances * (1 + p["mlp_depth"] * per_hidden) + 8 * queries * keys
