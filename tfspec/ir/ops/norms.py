"""Layer normalisation (Ba et al. 2016, §3.1) and RMSNorm (Zhang & Sennrich 2019)."""

from __future__ import annotations

from . import Op, no_products, register, rows


def _saved(graph, node, sizes, out):
    """The input and each row's statistics: LayerNorm's mean and reciprocal deviation, RMSNorm's
    reciprocal root mean square alone; RMSNorm with a gain keeps its normalised copy too
    (weight * normed)."""
    stats = 2 if node.op == "layer_norm" else 1
    saved = {node.inputs[0]: out(node.inputs[0]), f"{node.name}#stats": stats * rows(node, sizes) * 4}
    if node.op == "rms_norm" and "weight" in node.params:
        saved[f"{node.name}#normed"] = out(node.name)
    return saved


@register
class LayerNorm(Op):
    name, position_wise = "layer_norm", True
    flops, saved = staticmethod(no_products), staticmethod(_saved)


@register
class RmsNorm(Op):
    name, position_wise = "rms_norm", True
    flops, saved = staticmethod(no_products), staticmethod(_saved)
