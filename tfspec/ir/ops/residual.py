"""The residual stream's own ops: dropout and the residual add (§5.4, §3.1)."""

from __future__ import annotations

from . import Op, keeps_nothing, no_products, register


@register
class Dropout(Op):
    """Dropout with rate p (§5.4); the backward pass keeps its mask, a byte per value."""
    name, position_wise = "dropout", True
    flops = staticmethod(no_products)

    @staticmethod
    def saved(graph, node, sizes, out):
        return {f"{node.name}#mask": out(node.name) // 4} if node.attrs.get("p", 0.0) > 0 else {}


@register
class Add(Op):
    """x + scale * y, the residual connection; its gradient passes through unchanged."""
    name, position_wise = "add", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)
