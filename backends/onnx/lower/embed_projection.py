"""ONNX lowering of the embed projection (``tfspec.spec.embed_projection``), as the PyTorch
backend's ``backends/torch/embed_projection.py`` computes it."""

from __future__ import annotations

from tfspec.ir import Node

from . import lowering


@lowering("embed_projection")
def embed_projection(e, node: Node, x: str) -> str:
    """x W^T + b (a Gemm with transB); with ``transpose`` x W, the input projection's W as stored."""
    b, p = e.b, node.params
    if not node.attrs.get("transpose"):
        return b.linear(x, p["weight"], p.get("bias"))
    d, width = b.weights[p["weight"]].shape
    y = b.gemm(b.rows(x, d), p["weight"], transposed=False)
    b.flat.add(y)
    return y if x in b.flat else b.sequence(y, width)
