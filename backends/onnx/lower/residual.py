"""ONNX lowerings of the residual connection and of dropout (``tfspec/ir/ops/residual.py``)."""

from __future__ import annotations

from tfspec.ir import Node

from . import lowering


@lowering("dropout", rows=True)
def dropout(e, node: Node, x: str) -> str:
    return x  # inference graphs


@lowering("add", rows=True)
def add(e, node: Node, x: str, y: str) -> str:
    """x + y, the sub-layer's output ``y`` times the spec's residual_scale (Granite)."""
    scale = node.attrs.get("scale", 1.0)
    return e.b.op("Add", x, y if scale == 1.0 else e.b.op("Mul", y, e.b.const(scale)))
