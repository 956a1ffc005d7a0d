"""Dynamic tanh's op (``norm_type: tanh``, ``tfspec/norms/tanh.py``): weight * tanh(alpha * x) +
bias, elementwise, a learned scalar ``alpha`` and optional per-feature ``weight`` and ``bias``."""

from __future__ import annotations

from . import Op, no_products, register


@register
class TanhNorm(Op):
    """Elementwise only: no matrix products, nothing read across positions or features. Its
    backward pass keeps the input (for alpha's gradient) and tanh's output (tanh' = 1 - t^2)."""
    name, position_wise = "tanh_norm", True
    flops = staticmethod(no_products)

    @staticmethod
    def saved(graph, node, sizes, out):
        return {node.inputs[0]: out(node.inputs[0]), f"{node.name}#tanh": out(node.name)}
