"""ScaleNorm's op (``norm_type: l2``, ``tfspec/norms/l2.py``): g * x / max(||x||_2, eps) over the
last axis, one learned scalar ``gain``."""

from __future__ import annotations

from . import Op, no_products, register, rows


@register
class L2Norm(Op):
    """Elementwise work and one reduction per row: no matrix products. Its backward pass keeps
    the input and each row's norm (float32)."""
    name, position_wise = "l2_norm", True
    flops = staticmethod(no_products)

    @staticmethod
    def saved(graph, node, sizes, out):
        return {node.inputs[0]: out(node.inputs[0]), f"{node.name}#stats": rows(node, sizes) * 4}
