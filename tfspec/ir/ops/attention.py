"""Attention ops (§3.2): multi-head attention of every kind, and latent attention (DeepSeek-V2),
which caches one compressed latent per position instead of keys and values."""

from __future__ import annotations

from tfspec import modifiers
from tfspec.layers.attention import fused_kernel

from . import LayerOp, keeps_inputs_and_output, register, rows


@register
class Attention(LayerOp):
    name = "attention"

    @staticmethod
    def saved(graph, node, sizes, out):
        """The projected queries, keys and values, the heads' output and the log-sum-exp (the
        fused kernel's backward); keys and values repeated for grouped heads; where attention is
        spelled out (``fused_kernel``), the L x L softmax weights and what each score modifier
        keeps beside them."""
        a, rows_q = node.attrs, rows(node, sizes)
        keys = sizes[a.get("kv_seq", node.shape[1])]
        rows_k = sizes["B"] * keys
        h, g, d_k, d_v = a["heads"], a["kv_heads"], a["d_k"], a["d_v"]
        saved = {i: out(i) for i in node.inputs}
        saved[f"{node.name}#q"] = rows_q * h * d_k * 4
        saved[f"{node.name}#kv"] = rows_k * g * (d_k + d_v) * 4
        saved[f"{node.name}#heads"] = rows_q * h * d_v * 4
        saved[f"{node.name}#lse"] = rows_q * h * 4
        if g != h:
            saved[f"{node.name}#repeated"] = rows_k * h * (d_k + d_v) * 4
        if not fused_kernel(node):
            copies = 1 + sum(m.saved_scores for m in modifiers.ordered() if a.get(m.field) is not None)
            saved[f"{node.name}#weights"] = copies * rows_q * h * keys * 4
        return saved

    @classmethod
    def cached(cls, node) -> int:
        a = node.attrs
        return a["kv_heads"] * (a["d_k"] + a["d_v"])


@register
class LatentAttention(LayerOp):
    name = "latent_attention"
    saved = staticmethod(keeps_inputs_and_output)

    @classmethod
    def cached(cls, node) -> int:
        return node.layer.cached_width
