"""Dynamic tanh's ONNX lowering (``tfspec/norms/tanh.py``), as the PyTorch backend:
weight * tanh(alpha * x) + bias."""

from __future__ import annotations

from tfspec.ir import Node

from . import lowering


@lowering("tanh_norm", rows=True)
def tanh_norm(e, node: Node, x: str) -> str:
    b, p = e.b, node.params
    y = b.op("Tanh", b.op("Mul", x, b.param(p["alpha"])))
    if "weight" in p:
        y = b.op("Mul", y, b.param(p["weight"]))
    return b.op("Add", y, b.param(p["bias"])) if "bias" in p else y
